// The JSON `arfuse bench -J` writes (schema arfuse-bench/3). Pure: the caller supplies what it
// measured and the environment it ran in, so the CPU tests can check the schema.
//
// arfuse-bench/2 = arfuse-bench/1 (every member kept, same meaning) plus "nccl_env" (the NCCL_*
// environment the run saw) and, with --nccl-sweep, the sweep's members (nccl_sweep.h).
// arfuse-bench/3 = arfuse-bench/2 (every member kept, same meaning) plus "epilogues" (the --epilogue
// list, ["none"] by default) and an "epilogue" member in every result row (the nccl baseline's and a
// copy row's: see docs/perf.md). With an epilogue other than none, an addrmsnorm row's "bytes" is
// what that call reads and writes, and its copy row moves exactly those bytes.
// arfuse-bench/4 = arfuse-bench/3 (every member kept; "ratio" now against the best baseline of the
// run at that size, named by "ratio_to") plus "mode" ("in-process" or "procs"), "procs", "machine",
// "l2_bytes", "proxy" and "proxy_reason" (virtual ranks, or processes sharing one GPU: the kernels'
// own cost, never a performance figure), "ratio_baseline"; per row "proxy", "rotation" (the input
// sets the graph's calls rotate through, their bytes together and whether they exceed twice the
// L2), and for nccl-symm rows "nccl_kernels" (the kernels of the captured graph) and "symmetric"
// (whether those are NCCL's symmetric kernels); "note" where a row needs one. bench/peers.py writes
// the same schema with role "peer" rows.
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
  std::string role;               // "arfuse", "baseline", "addrmsnorm", "copy", "verify-pass", "baseline-pass"
  std::string epilogue = "none";  // harness::epilogueName of what the row timed (copy: whose bytes it copied)
  BenchTiming t;
  double algbw = 0, busbw = 0, ratio = 0;
  std::string ratioTo;  // the baseline "ratio" divides by (the best one at this size)
  int wrong = 0;
  std::string error;
  std::string note;                  // e.g. why NCCL did not run its symmetric kernels
  std::vector<std::string> kernels;  // nccl-symm: the kernel nodes of the captured graph
  int symmetric = -1;                // nccl-symm: 1 when NCCL's symmetric kernels ran, 0 when not; -1: n/a
  int sets = 0;                      // rotation: input sets, and their bytes together
  long long footprintBytes = 0;
  // arfuse rows: the plan the call ran under (arfuseCommQueryPlan: grid, block, reason), so a timing
  // can be read against its geometry (e.g. how many CTAs a row got on virtual ranks); 0: not queried.
  int planBlocks = 0, planThreads = 0;
  std::string planReason;
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
  double copyPeakGBps = 0;                                   // single-GPU runs
  std::vector<std::pair<std::string, std::string>> ncclEnv;  // the user's NCCL_* variables, sorted
  std::string mode = "in-process";                           // or "procs"
  int procs = 0;                                             // --procs N
  bool sharedGpu = false;                                    // --procs with every process on GPU 0
  long long l2Bytes = 0;
};

// True when the run's times are a proxy (virtual ranks, or processes sharing a GPU), and why.
bool isProxy(const BenchEnv& env);
std::string proxyReason(const BenchEnv& env);

// "ratio" and "ratio_to" of every row: its median over the fastest correct baseline row (role
// "baseline") at the same token count and epilogue; rows without one keep ratio 0.
void ratiosToBestBaseline(std::vector<Row>* rows);

// NCCL's symmetric-memory kernels are named ncclSymk* (2.28) / ncclSym* (2.27); its classic ones
// ncclDevKernel_* (names as the driver gives them: demangled, or mangled where that failed). Sets row->symmetric and,
// when they did not run, row->note saying what ran.
void classifyNcclKernels(Row* row);

struct NcclSweep;

std::string jsonEscape(const std::string& s);
// sweep: the --nccl-sweep results, or nullptr when none ran.
std::string benchJson(const BenchArgs& a, const BenchEnv& env, const std::vector<Row>& rows,
                      const NcclSweep* sweep = nullptr);

}  // namespace cli
}  // namespace arfuse
