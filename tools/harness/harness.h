// Correctness harness shared by `arfuse selftest` and the GPU tests: builds a group (real or
// virtual ranks), feeds fresh random inputs, poisons outputs, runs calls on every rank's stream,
// and checks the results against an fp64 reference and for bitwise equality across ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"

typedef struct CUgraphExec_st* cudaGraphExec_t;

namespace arfuse {
namespace harness {

struct CaseSpec {
  arfuseOp_t op = arfuseOpAllReduceAddRmsNorm;
  arfuseDataType_t dtype = arfuseBfloat16;
  int tokens = 1;
  int hidden = 4096;
  bool inPlace = false;  // norm_out = x, residual_out = residual_in (AllReduce: out = in)
  uint64_t seed = 1;
  float eps = 1e-6f;
  bool direct = false;  // one rank only: call arfuseAddRmsNorm (no communicator) instead
  // harness/epilogue.h EpilogueKind (fused op only): 0 (none) calls arfuseAllReduceAddRmsNorm;
  // anything else arfuseAllReduceEpilogue with that variant's inputs and outputs.
  int epilogue = 0;
};

struct CaseResult {
  bool ok = false;
  std::string algo;         // path the plan chose
  double errNorm = 0;       // ||norm_out - ref|| / ||ref|| (AllReduce: of out)
  double errResidual = 0;   // same for residual_out
  bool identical = false;   // outputs bitwise equal on every rank
  bool allWritten = false;  // no poisoned (NaN) element left
  std::string error;        // arfuse error text or check failure
};

struct Timing {
  bool ok = false;
  std::string error;
  double medianUs = 0, minUs = 0, maxUs = 0;  // per call: median/min/max over iterations of the slowest rank
  int iters = 0;
  // The input sets the graph's calls rotate through and their bytes together (rotation.h): the JSON
  // says whether they exceed the L2, i.e. whether a bandwidth-bound row's bytes came from HBM.
  int sets = 0;
  size_t footprintBytes = 0;
};

// A group of communicators with one non-blocking stream per rank and device buffers large enough
// for (maxTokens, maxHidden) in fp32.
class World {
 public:
  // devices: one entry per rank (repeats = virtual ranks). algo: -1 for the config default.
  World(const std::vector<int>& devices, int maxTokens, int maxHidden, int algo, int timeoutMs = -1);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  bool ok() const { return status_ == arfuseSuccess; }
  arfuseResult_t status() const { return status_; }
  const std::string& error() const { return error_; }
  int nranks() const { return static_cast<int>(devices_.size()); }
  arfuseComm_t comm(int r) const { return comms_[r]; }
  void* stream(int r) const { return streams_[r]; }
  const std::vector<int>& devices() const { return devices_; }

  // One call per rank with fresh random inputs; checks everything. With spec.epilogue: the variant's
  // outputs against harness/epilogue.h's checkEpilogue (a variant without norm_out runs twice, with
  // and without it, and must write the same bytes both times).
  CaseResult run(const CaseSpec& spec);
  // `calls` back-to-back calls without host synchronisation, inputs rotating over 8 sets and the
  // residual chained from each call to the next; checks the final residual against an exact
  // emulation of the kernels' fp32 rank-order arithmetic and the last norm against fp64.
  CaseResult runBackToBack(const CaseSpec& spec, int calls);
  // Captures `calls` chained calls per rank into a CUDA graph, then replays it `replays` times with
  // new inputs written between replays, checking after every replay.
  CaseResult runGraph(const CaseSpec& spec, int calls, int replays);
  // Back-to-back calls whose token counts (hence launch geometry) change from call to call
  // (tokens.size() <= 4), with no host synchronisation between them: fused, each call with its own
  // x, norm_out and residual_out; every output is checked against fp64 at the end.
  CaseResult runSequence(const CaseSpec& spec, const std::vector<int>& tokens);
  // Times `callsPerGraph` calls captured in one CUDA graph per rank, replayed warmup + iters times
  // (all ranks launched, then all waited for); per iteration the slowest rank's time over calls
  // 2..N counts, from events recorded inside the graphs. spec.epilogue: that variant's call.
  Timing timeGraph(const CaseSpec& spec, int callsPerGraph, int iters, int warmup);

 private:
  struct RankBuffers;
  struct CallInputs;
  struct EpilogueInputs;
  CaseResult runEpilogue(const CaseSpec& spec);
  // What a one-call case or a timing needs first: a built world and tensors of `bytes` that fit its
  // buffers; false with the reason in *error.
  bool admits(size_t bytes, std::string* error) const;
  // Rank 0's plan for the case, its path named in res->algo; false with the error in res->error.
  bool queryPlan(arfuseOp_t op, const CaseSpec& spec, arfusePlan_t* plan, CaseResult* res) const;
  // One call's inputs into slot 0 of every rank and NaN into its outputs (sequences: their own slots).
  bool uploadCall(const CallInputs& in, size_t bytes, const EpilogueInputs* epi, std::string* error);
  // One arfuseGroupStart/End around call(r) for every rank in order. The first rank whose call
  // fails ends the group, and its communicator's last error is the one in *error.
  bool groupCall(const std::function<arfuseResult_t(int r)>& call, std::string* error);
  // Waits for rank r's stream; false with CUDA's error in *error.
  bool waitForRank(int r, std::string* error);
  // False with the communicator's last error in *error when rank r has an asynchronous error.
  bool noAsyncError(int r, std::string* error);
  bool ensureEpilogueBuffers(std::string* error);
  bool captureGraphs(const std::function<bool()>& enqueue, std::vector<cudaGraphExec_t>* execs, std::string* error);
  CaseResult chained(const CaseSpec& spec, int calls, int replays, bool graph);
  std::vector<int> devices_;
  std::vector<arfuseComm_t> comms_;
  std::vector<void*> streams_;
  std::vector<RankBuffers*> bufs_;
  size_t capacityBytes_ = 0;
  int maxTokens_ = 0, maxHidden_ = 0;
  size_t scaleCapacity_ = 0;  // bytes of each scale_out buffer (allocated on first epilogue use)
  arfuseResult_t status_ = arfuseSuccess;
  std::string error_;
};

// Single GPU: arfuseAddRmsNorm (spec.op ignored) or, when copyBytes > 0, an SM copy kernel moving
// that many bytes (read + write twice that), timed the same way (graph of `callsPerGraph` launches, warmup + iters
// replays). Call i of the graph works on input/output set i % sets, sets = rotationSets(bytes of one call, L2)
// (rotation.h), so that bandwidth-bound sizes are served from HBM and not from the previous call's L2.
// spec.epilogue other than none: arfuseAllReduceEpilogue on a one-rank communicator of `device`
// (the local path), with that variant's inputs and outputs, timed the same way.
Timing timeSingleGpu(int device, const CaseSpec& spec, size_t copyBytes, int callsPerGraph, int iters, int warmup);

// Number of visible CUDA devices (0 when none or no driver).
int deviceCount();
// The device's L2 cache in bytes (0 when unknown).
size_t l2Bytes(int device);
// "NVIDIA H200 (sm_90)".
std::string deviceName(int device);

}  // namespace harness
}  // namespace arfuse
