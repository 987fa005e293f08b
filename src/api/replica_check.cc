#include "api/replica_check.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "comm/comm.h"
#include "common/params.h"

namespace arfuse {
namespace {

struct GroupCheck;

// One kind of checked call of one rank: what its host function needs. Interned, so that a call
// captured into a graph keeps a valid pointer for as long as the group lives.
struct HostCall {
  GroupCheck* owner;
  int rank;
  ReplicaShape shape;
  const unsigned char* data;  // the pinned buffer the copies land in
};

// The group's check state (Group::replicaCheck).
struct GroupCheck {
  explicit GroupCheck(Group* g) : group(g), gather(groupRanks(*g)), buffers(groupRanks(*g)) {}
  ~GroupCheck() {
    for (auto& perRank : buffers)
      for (auto& b : perRank) cudaFreeHost(b.first);
  }
  Group* group;
  ReplicaGather gather;
  std::mutex mu;  // buffers, calls
  // Per rank, every pinned buffer it was given, largest last. Older ones stay until the group is
  // freed: a graph captured before a buffer grew still copies into the old one.
  std::vector<std::vector<std::pair<unsigned char*, size_t>>> buffers;
  std::map<std::tuple<int, int, int, int, bool, const unsigned char*>, std::unique_ptr<HostCall>> calls;
  std::atomic<bool> warned{false};
};

void CUDART_CB arrive(void* p) {
  const HostCall* c = static_cast<const HostCall*>(p);
  Group* g = c->owner->group;
  if (groupHasHostError(*g)) return;
  std::string message;
  uint64_t check = 0;
  if (!c->owner->gather.arrive(c->rank, c->shape, c->data, &message, &check) || message.empty()) return;
  raiseHostError(*g, c->rank, arfuseMismatch, message,
                 strprintf("op=AllReduceAddRmsNorm check=%llu dtype=%s", static_cast<unsigned long long>(check),
                           arfuseDataTypeName(c->shape.dtype)),
                 __FILE__, __LINE__);
}

GroupCheck* groupCheckOf(Group* g) {
  return groupApiState<GroupCheck>(*g, &Group::replicaCheck, [g] { return std::make_shared<GroupCheck>(g); });
}

// A pinned buffer of at least `bytes` for `rank` into *out. Allocation is allowed while the caller's
// stream is being captured (relaxed capture mode for this thread, just around it).
Status bufferFor(GroupCheck* gc, int rank, size_t bytes, unsigned char** out) {
  std::lock_guard<std::mutex> lock(gc->mu);
  auto& list = gc->buffers[rank];
  if (!list.empty() && list.back().second >= bytes) {
    *out = list.back().first;
    return Status();
  }
  const size_t want = std::max(bytes, list.empty() ? size_t(64 * 1024) : 2 * list.back().second);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, want, cudaHostAllocPortable);
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return ARFUSE_FAIL(arfuseSystemError, "ARFUSE_CHECK_REPLICAS: cudaHostAlloc(%zu B) for rank %d's copy failed: %s",
                       want, rank, cudaGetErrorString(e));
  }
  list.emplace_back(static_cast<unsigned char*>(p), want);
  *out = list.back().first;
  return Status();
}

}  // namespace

bool replicaCheckEnabled() {
  static const bool on = [] {
    for (const ParamValue& v : paramValues())
      if (std::string(v.spec->name) == "ARFUSE_CHECK_REPLICAS") return v.value == "1";
    return false;
  }();
  return on;
}

Status enqueueReplicaCheck(arfuseComm* comm, const ReplicaShape& shape, const void* residualIn, const void* weight,
                           cudaStream_t stream) {
  Group* g = comm->group;
  if (groupRanks(*g) < 2) return Status();
  GroupCheck* gc = groupCheckOf(g);
  if (groupIsMultiProcess(*g)) {
    if (!gc->warned.exchange(true))
      ARFUSE_LOG(kLogWarn, comm->logContext(), "",
                 "ARFUSE_CHECK_REPLICAS=1 is not available for multi-process groups (the ranks' copies would be in "
                 "different processes); this communicator's calls are not checked");
    return Status();
  }
  const size_t rb = shape.residualBytes(), wb = shape.weightBytes();
  unsigned char* buf = nullptr;
  ARFUSE_CHECK(bufferFor(gc, comm->rank, rb + wb, &buf));
  HostCall* call = nullptr;
  {
    std::lock_guard<std::mutex> lock(gc->mu);
    auto key = std::make_tuple(comm->rank, shape.tokens, shape.hidden, int(shape.dtype), shape.hasResidual,
                               static_cast<const unsigned char*>(buf));
    std::unique_ptr<HostCall>& slot = gc->calls[key];
    if (!slot) slot.reset(new HostCall{gc, comm->rank, shape, buf});
    call = slot.get();
  }
  cudaError_t e = cudaSuccess;
  if (rb) e = cudaMemcpyAsync(buf, residualIn, rb, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaMemcpyAsync(buf + rb, weight, wb, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaLaunchHostFunc(stream, arrive, call);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return ARFUSE_FAIL(arfuseCudaError, "ARFUSE_CHECK_REPLICAS: enqueueing the copy of residual_in/weight failed: %s",
                       cudaGetErrorString(e));
  }
  return Status();
}

}  // namespace arfuse
