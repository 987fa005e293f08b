#include "api/enqueue.h"

#include <nccl.h>

#include <vector>

#include "algos/registry.h"
#include "api/group_schedule.h"
#include "api/replica_check.h"
#include "comm/multihost_watch.h"

namespace arfuse {
namespace {

thread_local int tGroupDepth = 0;
thread_local std::vector<PlannedCall> tDeferred;

// The call's NCCL step (the NCCL path's all-reduce), through the path's entry; `grouped`: inside an
// NCCL group of arfuseGroupEnd.
Status issueAllReduce(const PlannedCall& c, bool grouped = false) {
  const AlgoEntry* entry = findAlgo(c.algo);
  if (!entry || !entry->issue.collective)
    return ARFUSE_FAIL(arfuseInternalError, "algo %d has no NCCL step", int(c.algo));
  return entry->issue.collective(c.launch, grouped);
}

// The call's kernels (after its NCCL step, if it has one), through the path's registry entry. The replica check goes
// first, so that it copies what the call reads.
Status issueLaunch(const PlannedCall& c) {
  if (c.check) ARFUSE_CHECK(enqueueReplicaCheck(c.comm, c.checkShape, c.checkResidual, c.checkWeight, c.launch.stream));
  const AlgoEntry* entry = findAlgo(c.algo);
  if (!entry || !entry->issue.launch) return ARFUSE_FAIL(arfuseInternalError, "plan returned algo %d", int(c.algo));
  ARFUSE_CHECK(entry->issue.launch(c.launch));
  return Status();
}

// A call's step, its failure reported against its communicator with its fields.
arfuseResult_t report(const PlannedCall& c, const Status& st) {
  return st.ok() ? arfuseSuccess : fail(c.comm, st, c.fields);
}

bool sameStream(const PlannedCall& a, const PlannedCall& b) {
  return a.device == b.device && a.launch.stream == b.launch.stream;
}

}  // namespace

arfuseResult_t enqueueCall(const PlannedCall& c) {
  const AlgoEntry* entry = findAlgo(c.algo);
  if (tGroupDepth > 0 && entry && entry->issue.notInGroups)
    return report(c, ARFUSE_FAIL(arfuseInvalidUsage, "%s", entry->issue.notInGroups));
  if (tGroupDepth > 0) {
    bool defer = c.hasAllReduce();
    for (const PlannedCall& d : tDeferred) {
      if (d.comm == c.comm && !sameStream(d, c))
        return report(
            c, ARFUSE_FAIL(arfuseInvalidUsage,
                           "rank %d: this call is on stream %p but its earlier call in this "
                           "arfuseGroupStart/End is on stream %p and waits for arfuseGroupEnd (NCCL path), "
                           "so no event can order the two: inside a group, make every call of a "
                           "communicator on one stream",
                           c.comm->rank, static_cast<void*>(c.launch.stream), static_cast<void*>(d.launch.stream)));
      defer = defer || sameStream(d, c);
    }
    if (defer) {
      if (static_cast<int>(tDeferred.size()) >= kMaxGroupCalls)
        return report(c, ARFUSE_FAIL(arfuseInvalidUsage,
                                     "arfuseGroupStart/End holds at most %d deferred calls per host thread and this "
                                     "is one more: call arfuseGroupEnd (is one missing?) before making more calls",
                                     kMaxGroupCalls));
      tDeferred.push_back(c);
      return arfuseSuccess;
    }
  }
  if (c.hasAllReduce()) {
    const arfuseResult_t st = report(c, issueAllReduce(c));
    if (st != arfuseSuccess) return st;
  }
  return c.hasLaunch() ? report(c, issueLaunch(c)) : arfuseSuccess;
}

arfuseResult_t groupStart() {
  ++tGroupDepth;
  const ncclResult_t nr = ncclGroupStart();
  if (nr != ncclSuccess) {
    --tGroupDepth;
    return fail(nullptr, ARFUSE_FAIL(arfuseNcclError, "arfuseGroupStart: ncclGroupStart: %s", ncclGetErrorString(nr)));
  }
  return arfuseSuccess;
}

arfuseResult_t groupEnd() {
  if (tGroupDepth == 0)
    return fail(nullptr, ARFUSE_FAIL(arfuseInvalidUsage, "arfuseGroupEnd without a matching arfuseGroupStart"));
  // Closes the NCCL group arfuseGroupStart opened (the caller's own NCCL calls inside it launch
  // here); arfuse's NCCL-path calls were held back and go in waves below.
  const ncclResult_t nr = ncclGroupEnd();
  if (--tGroupDepth > 0) {
    if (nr != ncclSuccess)
      return fail(nullptr, ARFUSE_FAIL(arfuseNcclError, "arfuseGroupEnd: ncclGroupEnd: %s", ncclGetErrorString(nr)));
    return arfuseSuccess;
  }
  std::vector<PlannedCall> work;
  work.swap(tDeferred);
  if (nr != ncclSuccess)
    return fail(nullptr, ARFUSE_FAIL(arfuseNcclError,
                                     "arfuseGroupEnd: ncclGroupEnd: %s (%zu deferred arfuse calls not launched)",
                                     ncclGetErrorString(nr), work.size()));
  std::vector<GroupItem> items(work.size());
  for (size_t i = 0; i < work.size(); ++i) {
    items[i].device = work[i].device;
    items[i].stream = reinterpret_cast<uintptr_t>(work[i].launch.stream);
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
      finishGroupedNccl();  // the NCCL kernels are launched now: the watch's "after" events and guards follow
      if (e != ncclSuccess && first == arfuseSuccess)
        first =
            fail(nullptr, ARFUSE_FAIL(arfuseNcclError, "arfuseGroupEnd: ncclGroupEnd of the deferred all-reduces: %s",
                                      ncclGetErrorString(e)));
      continue;
    }
    if (first != arfuseSuccess) continue;
    if (s.kind == GroupStepKind::kNcclGroupStart) {
      const ncclResult_t e = ncclGroupStart();
      if (e != ncclSuccess) {
        first =
            fail(nullptr, ARFUSE_FAIL(arfuseNcclError, "arfuseGroupEnd: ncclGroupStart: %s", ncclGetErrorString(e)));
        continue;
      }
      open = true;
      continue;
    }
    const PlannedCall& c = work[s.item];
    if (!commIsLive(c.comm)) continue;  // destroyed since the call: nothing of it may run
    DeviceScope scope(c.device);
    first = report(c, s.kind == GroupStepKind::kAllReduce ? issueAllReduce(c, open) : issueLaunch(c));
  }
  finishGroupedNccl();  // none left, unless a wave's group never ended
  return first;
}

}  // namespace arfuse
