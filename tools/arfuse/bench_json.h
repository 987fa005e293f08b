// The JSON `arfuse bench -J` writes (schema arfuse-bench/1). Pure: the caller supplies what it
// measured and the environment it ran in, so the CPU tests can check the schema.
#pragma once

#include <string>
#include <vector>

#include "bench_args.h"

namespace arfuse {
namespace cli {

struct BenchTiming {
  bool ok = false;
  std::string error;
  double medianUs = 0, minUs = 0, maxUs = 0;
  int iters = 0;
};

struct Row {
  double passMs = 0;  // --verify-pass: ms per pass
  int tokens = 0;
  long long bytes = 0;
  std::string algo;
  std::string role;  // "arfuse", "baseline", "addrmsnorm", "copy", "verify-pass", "baseline-pass"
  BenchTiming t;
  double algbw = 0, busbw = 0, ratio = 0;
  int wrong = 0;
  std::string error;
};

struct BenchEnv {
  std::string arfuse;  // arfuseGetBuildInfo()
  std::string date;    // ISO 8601 UTC
  std::string gpu;
  std::string driver;
  int cudaRuntime = 0;
  int nccl = 0;
  int nranks = 1;
  bool virtualRanks = false;
  double copyPeakGBps = 0;  // single-GPU runs
};

std::string jsonEscape(const std::string& s);
std::string benchJson(const BenchArgs& a, const BenchEnv& env, const std::vector<Row>& rows);

}  // namespace cli
}  // namespace arfuse
