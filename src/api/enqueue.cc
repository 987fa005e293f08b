#include "api/enqueue.h"

#include <nccl.h>

#include <vector>

#include "algos/hierarchical/launch.h"
#include "algos/launch.h"
#include "api/group_schedule.h"
#include "api/replica_check.h"

namespace arfuse {
namespace {

ncclDataType_t ncclType(arfuseDataType_t d) {
  return d == arfuseBfloat16 ? ncclBfloat16 : d == arfuseFloat16 ? ncclFloat16 : ncclFloat32;
}

thread_local int tGroupDepth = 0;
thread_local std::vector<PlannedCall> tDeferred;

arfuseResult_t issueAllReduce(const PlannedCall& c) {
  ncclComm_t nc = c.nccl ? c.nccl : c.comm->group->ranks[c.comm->rank].nccl;
  if (c.gather) {
    const ncclResult_t nr = ncclAllGather(c.sendBuf, c.recvBuf, c.count, ncclType(c.dtype), nc, c.stream);
    if (nr != ncclSuccess) FAIL_F(c.comm, arfuseNcclError, c.fields, "ncclAllGather: %s", ncclGetErrorString(nr));
    return arfuseSuccess;
  }
  const ncclResult_t nr = ncclAllReduce(c.sendBuf, c.recvBuf, c.count, ncclType(c.dtype), ncclSum, nc, c.stream);
  if (nr != ncclSuccess) FAIL_F(c.comm, arfuseNcclError, c.fields, "ncclAllReduce: %s", ncclGetErrorString(nr));
  return arfuseSuccess;
}

// The hierarchical path (groups that span hosts): reduce-scatter within the host, the all-reduce
// of this rank's fp32 slice across hosts, gather + epilogue within the host, in stream order.
// The gather kernel's descriptor says phase 2 (variant 1), so the two kernels can never pair.
arfuseResult_t issueHierarchical(const PlannedCall& c) {
  int e = launchHierScatter(c.scatter, c.hier, c.stream);
  if (e != cudaSuccess)
    FAIL_F(c.comm, arfuseCudaError, c.fields, "hierarchical reduce-scatter launch (%d x %d threads) failed: %s",
           c.scatter.blocks, c.scatter.threads, cudaGetErrorString(cudaError_t(e)));
  const ncclResult_t nr = ncclAllReduce(c.sendBuf, c.recvBuf, c.count, ncclFloat32, ncclSum, c.nccl, c.stream);
  if (nr != ncclSuccess)
    FAIL_F(c.comm, arfuseNcclError, c.fields, "ncclAllReduce across hosts: %s", ncclGetErrorString(nr));
  HierArgs gather = c.hier;
  gather.k.desc.w0 |= 1u << 12;
  e = launchHierGather(c.launch, gather, c.stream);
  if (e != cudaSuccess)
    FAIL_F(c.comm, arfuseCudaError, c.fields,
           "hierarchical gather launch (%d x %d threads, %d vectors per thread) failed: %s", c.launch.blocks,
           c.launch.threads, c.launch.vecs, cudaGetErrorString(cudaError_t(e)));
  return arfuseSuccess;
}

// The call's own kernels: after the NCCL all-reduce for the NCCL path (its epilogue), the whole
// call for every other path. The replica check goes first, so that it copies what the call reads.
arfuseResult_t issueLaunch(const PlannedCall& c) {
  if (c.check) {
    std::string msg;
    const arfuseResult_t st = enqueueReplicaCheck(c.comm, c.checkShape, c.checkResidual, c.checkWeight, c.stream, &msg);
    if (st != arfuseSuccess) return fail(c.comm, st, __FILE__, __LINE__, msg, c.fields);
  }
  switch (c.algo) {
    case arfuseAlgoLocal:
      if (!c.fused) {
        if (c.copyBytes == 0) return arfuseSuccess;
        const cudaError_t e = cudaMemcpyAsync(c.copyDst, c.copySrc, c.copyBytes, cudaMemcpyDeviceToDevice, c.stream);
        if (e != cudaSuccess) FAIL_F(c.comm, arfuseCudaError, c.fields, "cudaMemcpyAsync: %s", cudaGetErrorString(e));
        return arfuseSuccess;
      }
      return launchLocalKernel(c.comm, c.launch, c.la, c.stream);
    case arfuseAlgoNccl:
      return launchLocalKernel(c.comm, c.launch, c.la, c.stream);
    case arfuseAlgoHierarchical:
      return issueHierarchical(c);
    default: {
      const Launch& l = c.launch;
      int e = 0;
      switch (c.algo) {
        case arfuseAlgoOneShot:
          e = launchOneShot(l, c.ka, c.stream);
          break;
        case arfuseAlgoTwoShot:
          e = launchTwoShot(l, c.ka, c.stream);
          break;
        case arfuseAlgoLowLatency:
          e = launchLowLatency(l, c.ka, c.stream);
          break;
        case arfuseAlgoHostStaged:
          e = launchHostStaged(l, c.twoShotVariant, c.ka, c.stream);
          break;
        default:
          FAIL_F(c.comm, arfuseInternalError, c.fields, "plan returned algo %d", int(c.algo));
      }
      if (e != cudaSuccess)
        FAIL_F(c.comm, arfuseCudaError, c.fields,
               "kernel launch (%d x %d threads, %d chunks, %d vectors per thread) failed: %s", l.blocks, l.threads,
               l.chunks, l.vecs, cudaGetErrorString(cudaError_t(e)));
      return arfuseSuccess;
    }
  }
}

bool sameStream(const PlannedCall& a, const PlannedCall& b) { return a.device == b.device && a.stream == b.stream; }

}  // namespace

Launch launchOf(const Plan& plan, arfuseDataType_t dtype, KernelKind kind) {
  Launch l;
  l.dtype = dtype;
  l.kind = kind;
  l.vecs = plan.geo.vecs;
  l.blocks = plan.blocks;
  l.threads = plan.threads;
  l.chunks = plan.geo.chunks;
  l.pdl = plan.pdl;
  return l;
}

arfuseResult_t launchLocalKernel(arfuseComm* comm, const Launch& l, const LocalArgs& la, cudaStream_t stream) {
  const int e = launchLocal(l, la, stream);
  if (e != cudaSuccess)
    FAIL(comm, arfuseCudaError, "launch of add+rmsnorm (%d x %d threads, %d vectors per thread) failed: %s", l.blocks,
         l.threads, l.vecs, cudaGetErrorString(cudaError_t(e)));
  return arfuseSuccess;
}

arfuseResult_t enqueueCall(const PlannedCall& c) {
  if (tGroupDepth > 0 && c.algo == arfuseAlgoHierarchical)
    FAIL_F(c.comm, arfuseInvalidUsage, c.fields,
           "a hierarchical-path call (a group that spans hosts) cannot be made inside arfuseGroupStart/End: its NCCL "
           "all-reduce sits between two kernels, which an NCCL group would reorder. Call it outside the group, or "
           "force algo=nccl");
  if (tGroupDepth > 0) {
    bool defer = c.hasAllReduce();
    for (const PlannedCall& d : tDeferred) {
      if (d.comm == c.comm && !sameStream(d, c))
        FAIL_F(c.comm, arfuseInvalidUsage, c.fields,
               "rank %d: this call is on stream %p but its earlier call in this arfuseGroupStart/End is on stream %p "
               "and waits for arfuseGroupEnd (NCCL path), so no event can order the two: inside a group, make every "
               "call of a communicator on one stream",
               c.comm->rank, static_cast<void*>(c.stream), static_cast<void*>(d.stream));
      defer = defer || sameStream(d, c);
    }
    if (defer) {
      if (static_cast<int>(tDeferred.size()) >= kMaxGroupCalls)
        FAIL_F(c.comm, arfuseInvalidUsage, c.fields,
               "arfuseGroupStart/End holds at most %d deferred calls per host thread and this is one more: call "
               "arfuseGroupEnd (is one missing?) before making more calls",
               kMaxGroupCalls);
      tDeferred.push_back(c);
      return arfuseSuccess;
    }
  }
  if (c.hasAllReduce()) {
    const arfuseResult_t st = issueAllReduce(c);
    if (st != arfuseSuccess) return st;
  }
  return c.hasLaunch() ? issueLaunch(c) : arfuseSuccess;
}

arfuseResult_t groupStart() {
  ++tGroupDepth;
  const ncclResult_t nr = ncclGroupStart();
  if (nr != ncclSuccess) {
    --tGroupDepth;
    FAIL(nullptr, arfuseNcclError, "arfuseGroupStart: ncclGroupStart: %s", ncclGetErrorString(nr));
  }
  return arfuseSuccess;
}

arfuseResult_t groupEnd() {
  if (tGroupDepth == 0) FAIL(nullptr, arfuseInvalidUsage, "arfuseGroupEnd without a matching arfuseGroupStart");
  // Closes the NCCL group arfuseGroupStart opened (the caller's own NCCL calls inside it launch
  // here); arfuse's NCCL-path calls were held back and go in waves below.
  const ncclResult_t nr = ncclGroupEnd();
  if (--tGroupDepth > 0) {
    if (nr != ncclSuccess) FAIL(nullptr, arfuseNcclError, "arfuseGroupEnd: ncclGroupEnd: %s", ncclGetErrorString(nr));
    return arfuseSuccess;
  }
  std::vector<PlannedCall> work;
  work.swap(tDeferred);
  if (nr != ncclSuccess)
    FAIL(nullptr, arfuseNcclError, "arfuseGroupEnd: ncclGroupEnd: %s (%zu deferred arfuse calls not launched)",
         ncclGetErrorString(nr), work.size());
  std::vector<GroupItem> items(work.size());
  for (size_t i = 0; i < work.size(); ++i) {
    items[i].device = work[i].device;
    items[i].stream = reinterpret_cast<uintptr_t>(work[i].stream);
    items[i].allReduce = work[i].hasAllReduce();
    items[i].launch = work[i].hasLaunch();
  }
  // The first failure stops every later launch (their inputs may be what failed to be computed);
  // an open NCCL group is still closed so that NCCL's state stays sane.
  arfuseResult_t first = arfuseSuccess;
  bool open = false;
  for (const GroupStep& s : scheduleGroup(items)) {
    if (s.kind == GroupStepKind::kNcclGroupEnd) {
      if (!open) continue;
      open = false;
      const ncclResult_t e = ncclGroupEnd();
      if (e != ncclSuccess && first == arfuseSuccess)
        first = fail(nullptr, arfuseNcclError, __FILE__, __LINE__,
                     strprintf("arfuseGroupEnd: ncclGroupEnd of the deferred all-reduces: %s", ncclGetErrorString(e)));
      continue;
    }
    if (first != arfuseSuccess) continue;
    if (s.kind == GroupStepKind::kNcclGroupStart) {
      const ncclResult_t e = ncclGroupStart();
      if (e != ncclSuccess) {
        first = fail(nullptr, arfuseNcclError, __FILE__, __LINE__,
                     strprintf("arfuseGroupEnd: ncclGroupStart: %s", ncclGetErrorString(e)));
        continue;
      }
      open = true;
      continue;
    }
    const PlannedCall& c = work[s.item];
    if (!commIsLive(c.comm)) continue;  // destroyed since the call: nothing of it may run
    DeviceScope scope(c.device);
    first = s.kind == GroupStepKind::kAllReduce ? issueAllReduce(c) : issueLaunch(c);
  }
  return first;
}

}  // namespace arfuse
