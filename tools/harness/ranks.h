// The ranks one process drives in `arfuse bench` when World (harness.h) does not fit: one rank of a
// multi-process group (`--procs N`: arfuseCommInitRank / ncclCommInitRank, the engines' mode), or
// the NCCL symmetric-memory baseline in process (ncclCommInitAll). Same method as World: fresh random
// inputs, outputs poisoned, every result checked against fp64 first; CUDA graphs of `calls` calls
// timed by events inside the graph after the first call.
//
// Inputs are a pure function of (seed, global rank), so a process that drives one rank regenerates
// every rank's x and computes the fp64 reference of the whole group itself; bitwise equality across
// processes is checked by the caller from the output hashes.
//
// The baselines (what a user without arfuse runs): ncclAllReduce into a separate sum buffer, then
// arfuseAddRmsNorm (residual add + RMSNorm) on that sum. kNcclSymm allocates x and the sum with
// ncclMemAlloc and registers them as one window (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC), the
// precondition of NCCL 2.27+'s symmetric kernels; whether those kernels ran is read from the kernel
// nodes of the captured graph (kernelNames()), not assumed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "harness/harness.h"

namespace arfuse {
namespace harness {

enum class Backend {
  kArfuse,    // arfuseAllReduceAddRmsNorm / arfuseAllReduce on an arfuse communicator (algo below)
  kNccl,      // ncclAllReduce on cudaMalloc buffers + arfuseAddRmsNorm
  kNcclSymm,  // ncclAllReduce on window-registered ncclMemAlloc buffers + arfuseAddRmsNorm
};

struct GroupSpec {
  Backend backend = Backend::kArfuse;
  int nranks = 1;            // ranks in the whole group
  std::vector<int> ranks;    // the global ranks this process drives (all of them in process)
  std::vector<int> devices;  // one per local rank
  int maxTokens = 1, maxHidden = 8;
  int algo = -1;       // kArfuse: a forced path, or -1 for the plan
  int timeoutMs = -1;  // kArfuse: arfuseConfig_t.timeoutMs (-1: default)
  // Multi-process: the unique id (arfuseUniqueId or ncclUniqueId bytes) rank 0 created; empty when
  // this process drives every rank.
  std::string uniqueId;
};

struct RankCheck {
  bool ok = false;
  std::string error;
  std::string algo;  // kArfuse: the path the plan chose; baselines: "nccl" / "nccl-symm"
  double errNorm = 0, errResidual = 0;
  bool identical = true;  // local ranks' outputs bitwise equal (always true for one local rank)
  uint64_t hash = 0;      // FNV-1a of local rank 0's outputs (residual_out, then norm_out)
};

class RankGroup {
 public:
  explicit RankGroup(const GroupSpec& spec);
  ~RankGroup();
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  // kArfuse: local rank 0's communicator (plan queries); nullptr otherwise.
  arfuseComm_t comm() const { return comms_.empty() ? nullptr : comms_[0]; }

  // One call per local rank with fresh inputs of the seed; checked against fp64.
  RankCheck check(const CaseSpec& spec);
  // `calls` chained calls per local rank in one CUDA graph, replayed warmup + iters times; per
  // replay the slowest local rank's time over calls 2..N, in ms (not yet divided by the calls).
  bool time(const CaseSpec& spec, int calls, int iters, int warmup, std::vector<double>* ms, Timing* info);
  // The kernels in local rank 0's last captured graph, in node order (NCCL's kernels first).
  const std::vector<std::string>& kernelNames() const { return kernels_; }

 private:
  struct Local;
  bool enqueue(const CaseSpec& spec, int call, std::string* error);
  void fail(const std::string& e) {
    if (error_.empty()) error_ = e;
  }
  GroupSpec spec_;
  std::vector<Local*> locals_;
  std::vector<arfuseComm_t> comms_;
  std::vector<void*> ncclComms_;  // ncclComm_t
  size_t capacity_ = 0;           // bytes of each x slot / sum / norm buffer
  std::vector<std::string> kernels_;
  std::string error_;
};

// Names of the kernel nodes of a captured CUDA graph (child graphs included), through the driver
// API found at run time (cudaGetDriverEntryPointByVersion; no link to libcuda). Empty with *error
// set when the driver cannot tell.
std::vector<std::string> graphKernelNames(void* cudaGraph, std::string* error);

// FNV-1a, 64 bits.
uint64_t fnv1a(const void* p, size_t n, uint64_t h = 1469598103934665603ull);

}  // namespace harness
}  // namespace arfuse
