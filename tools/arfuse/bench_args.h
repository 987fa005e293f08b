// Argument parsing of `arfuse bench` (pure; CPU-tested).
#pragma once

#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "harness/epilogue.h"

namespace arfuse {
namespace cli {

// --nccl-sweep without a SPEC, and its bound on each child process.
constexpr const char* kDefaultNcclSweepSpec = "proto,algo,channels";
constexpr int kDefaultNcclSweepTimeoutS = 120;
// --algo nccl-symm: the NCCL symmetric-memory baseline (ncclMemAlloc buffers registered as a
// symmetric window), which is no arfuse path; an id beyond arfuseAlgo_t's.
constexpr int kAlgoNcclSymm = 100;
// --procs: the bound on the whole multi-process run, seconds.
constexpr int kDefaultProcsTimeoutS = 300;
// The name of an --algo item ("nccl-symm" for kAlgoNcclSymm).
const char* algoName(int algo);

struct BenchArgs {
  std::string op = "fused";  // fused | allreduce | addrmsnorm
  std::vector<int> tokens = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};
  int hidden = 7168;
  arfuseDataType_t dtype = arfuseBfloat16;
  int iters = 50;
  int warmup = 10;
  int callsPerGraph = 20;
  bool check = true;
  bool graph = true;
  std::string jsonPath;
  int ranks = 0;           // 0: all GPUs, or 2 virtual ranks on one GPU
  std::vector<int> algos;  // empty: all available; arfuseAlgo_t values and kAlgoNcclSymm
  // --procs N: one process per rank (arfuseCommInitRank / ncclCommInitRank), as engines run; with
  // fewer GPUs than N every process shares GPU 0 (a proxy, like virtual ranks). 0: in process.
  int procs = 0;
  int hosts = 0;  // --hosts H with --procs: simulated hosts (TEST ONLY: ARFUSE_TEST_HOST_ID, docs/multihost.md)
  int procsTimeoutS = kDefaultProcsTimeoutS;
  int procRank = -1;                 // internal: this process is rank R of a --procs run
  std::string procDir;               // internal: where the --procs run's ranks meet (ids, results)
  std::vector<std::string> rawArgs;  // the arguments as given (a --procs child gets them again)
  bool virtualRanks = false;         // force every rank onto GPU 0
  std::string model;                 // preset name, "" when none
  int layers = 0;                    // from --model or --layers; needed by --verify-pass
  bool verifyPass = false;           // time 2 x layers fused calls in one graph, against the baseline
  // --nccl-sweep[=SPEC]: re-run the NCCL baseline once per NCCL setting, each in a fresh process
  // (nccl_sweep.h has the SPEC grammar).
  bool ncclSweep = false;
  std::string ncclSweepSpec = kDefaultNcclSweepSpec;
  int ncclSweepTimeoutS = kDefaultNcclSweepTimeoutS;  // bound on each child, seconds
  std::string ncclSweepChild;  // internal: this process is a sweep child; time the baseline, JSON here
  // --epilogue LIST: harness::EpilogueKind values, in the order given. {none} (the default) is
  // today's bench: arfuseAllReduceAddRmsNorm / arfuseAddRmsNorm and today's table.
  std::vector<int> epilogues = {harness::kEpilogueNone};
  bool help = false;
  std::string commandLine;
  std::string machine;  // --machine LABEL: names the machine in the JSON, for scripts/perf_table.py
  // True when the run times anything other than `none` (the epilogue table and its columns).
  bool epilogueTable() const { return !(epilogues.size() == 1 && epilogues[0] == harness::kEpilogueNone); }
};

struct ModelPreset {
  const char* name;
  int hidden;
  int layers;
};
// kimi-k2, deepseek-v3, llama-3-70b, qwen3-235b; nullptr if unknown.
const ModelPreset* findModel(const std::string& name);

// Returns false with *error naming the argument.
bool parseBenchArgs(const std::vector<std::string>& args, BenchArgs* out, std::string* error);
const char* benchUsage();

}  // namespace cli
}  // namespace arfuse
