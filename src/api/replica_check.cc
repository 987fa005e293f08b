#include "api/replica_check.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "api/host_abort.h"
#include "comm/comm.h"
#include "common/params.h"
#include "diag/records.h"

namespace arfuse {
namespace {

struct GroupCheck;

// One kind of checked call of one rank: what its host function needs. Interned, so that a call
// captured into a graph keeps a valid pointer for as long as the group lives.
struct HostCall {
  GroupCheck* owner;
  int rank;
  ReplicaShape shape;
  const unsigned char* data;  // the pinned buffer the copies land in (multi-process: this rank's shared slot)
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
  // Multi-process groups: checked calls of this process's rank so far (its host functions run in
  // stream order, one at a time), and the shared area they meet in.
  uint64_t sharedCount = 0;
  ReplicaArea* area = nullptr;
  size_t slotBytes = 0;
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

// Multi-process groups: this rank's copy is in its shared slot; the last rank to arrive compares.
// A difference is raised in the comparing process (its ERROR line) and recorded in the group's
// host-mapped records, where the other processes read it (kErrReplicaMismatch).
void CUDART_CB arriveInArea(void* p) {
  const HostCall* c = static_cast<const HostCall*>(p);
  GroupCheck* gc = c->owner;
  Group* g = gc->group;
  const uint64_t n = ++gc->sharedCount;
  if (groupHasHostError(*g)) return;
  std::string message;
  int peer = -1;  // the lowest rank whose copy differs from rank 0's
  if (!arriveShared(gc->area, groupRanks(*g), gc->slotBytes, c->rank, n, c->shape, &message, &peer) || message.empty())
    return;
  ErrorRecord rec{};
  rec.code = kErrReplicaMismatch;
  rec.peer = peer;
  rec.phase = kPhaseReplicaCheck;
  rec.call = n;
  writeHostErrorRecord(groupSharedArea(*g), c->rank, rec);
  raiseHostError(*g, c->rank, arfuseMismatch, message,
                 strprintf("op=AllReduceAddRmsNorm check=%llu dtype=%s", static_cast<unsigned long long>(n),
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

bool replicaCheckEnabled() { return paramCheckReplicas(); }

Status enqueueReplicaCheck(arfuseComm* comm, const ReplicaShape& shape, const void* residualIn, const void* weight,
                           cudaStream_t stream) {
  Group* g = comm->group;
  if (groupRanks(*g) < 2) return Status();
  GroupCheck* gc = groupCheckOf(g);
  const size_t rb = shape.residualBytes(), wb = shape.weightBytes();
  unsigned char* buf = nullptr;
  const bool shared = groupIsMultiProcess(*g);
  if (shared) {
    std::lock_guard<std::mutex> lock(gc->mu);
    if (!gc->area) {
      size_t slot = 0;
      gc->area = replicaAreaAt(groupReplicaArea(*g, &slot));
      gc->slotBytes = slot;
    }
    if (!gc->area)  // init made no area: not every rank had ARFUSE_CHECK_REPLICAS=1 read yet (cannot happen)
      return ARFUSE_FAIL(arfuseInternalError, "ARFUSE_CHECK_REPLICAS: this multi-process group has no shared area");
    if (rb + wb > gc->slotBytes)
      return ARFUSE_FAIL(arfuseInternalError,
                         "ARFUSE_CHECK_REPLICAS: %zu B of residual_in and weight exceed the %zu B "
                         "slot sized from maxTokens and maxHidden",
                         rb + wb, gc->slotBytes);
    buf = replicaSlot(gc->area, comm->rank, gc->slotBytes);
    if (groupMultiHost(*g) && !gc->warned.exchange(true))
      ARFUSE_LOG(kLogInfo, comm->logContext(), "",
                 "ARFUSE_CHECK_REPLICAS=1 in a group that spans hosts: the ranks of each host are compared with "
                 "each other, not across hosts");
  } else {
    ARFUSE_CHECK(bufferFor(gc, comm->rank, rb + wb, &buf));
  }
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
  if (e == cudaSuccess) e = cudaLaunchHostFunc(stream, shared ? arriveInArea : arrive, call);
  // The host function may raise the abort, which it cannot carry to the device itself (no CUDA call
  // in a host function): the next node does, so this very call -- a CUDA-graph replay too -- is
  // refused instead of computing from the replicas found different (api/host_abort.h).
  AbortTargets targets;
  targets.count = groupDeviceAbortWords(*g, comm->rank, targets.words, kMaxAbortTargets);
  if (e == cudaSuccess) e = launchHostAbortToDevice(&groupSharedDevice(*g)->abort, targets, stream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return ARFUSE_FAIL(arfuseCudaError, "ARFUSE_CHECK_REPLICAS: enqueueing the copy of residual_in/weight failed: %s",
                       cudaGetErrorString(e));
  }
  return Status();
}

}  // namespace arfuse
