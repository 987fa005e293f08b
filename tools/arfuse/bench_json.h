// The JSON `arfuse bench -J` writes (schema arfuse-bench/3). Pure: the caller supplies what it
// measured and the environment it ran in, so the CPU tests can check the schema.
//
// arfuse-bench/2 = arfuse-bench/1 (every member kept, same meaning) plus "nccl_env" (the NCCL_*
// environment the run saw) and, with --nccl-sweep, the sweep's members (nccl_sweep.h).
// arfuse-bench/3 = arfuse-bench/2 (every member kept, same meaning) plus "epilogues" (the --epilogue
// list, ["none"] by default) and an "epilogue" member in every result row (the nccl baseline's and a
// copy row's: see docs/perf.md). With an epilogue other than none, an addrmsnorm row's "bytes" is
// what that call reads and writes, and its copy row moves exactly those bytes.
#pragma once

#include <string>
#include <utility>
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
  std::string epilogue = "none";  // harness::epilogueName of what the row timed (copy: whose bytes it copied)
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
  std::vector<std::pair<std::string, std::string>> ncclEnv;  // the user's NCCL_* variables, sorted
};

struct NcclSweep;

std::string jsonEscape(const std::string& s);
// sweep: the --nccl-sweep results, or nullptr when none ran.
std::string benchJson(const BenchArgs& a, const BenchEnv& env, const std::vector<Row>& rows,
                      const NcclSweep* sweep = nullptr);

}  // namespace cli
}  // namespace arfuse
