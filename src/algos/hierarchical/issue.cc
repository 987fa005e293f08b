// The hierarchical path's launch, bound to its registry entry: the reduce-scatter within the host,
// the all-reduce of this rank's fp32 slice across hosts, the gather + epilogue within the host, in
// stream order on the call's stream (algos/hierarchical/kernel.cuh). The gather kernel's descriptor
// says phase 2 (variant 1), so a rank in one phase can never pair with a peer in the other.
#include "algos/issue.h"

#include <nccl.h>

#include "algos/hierarchical/launch.h"
#include "algos/hierarchical/plan.h"
#include "algos/shared.h"
#include "comm/multihost.h"
#include "comm/multihost_watch.h"
#include "init/group.h"

namespace arfuse {
namespace {

// The call's three steps: the multi-rank kernels' arguments over the intra-host group (as for
// one-shot), the views of the local ranks' buffers, the slice that crosses hosts and its watch; the
// reduce-scatter kernel's grid (the gather + epilogue kernel has the plan's geometry).
Status prepare(const PrepareContext& p, AlgoLaunch* out) {
  const MultiHost& mh = *groupMultiHost(*p.g);
  HierLaunch& h = out->args<HierLaunch>();
  h = HierLaunch{};
  h.args.k = multiRankArgs(p);
  h.args.count = static_cast<long long>(p.call.tokens) * p.call.hidden;
  h.args.sliceElems = hierarchicalSliceElems(h.args.count, mh.layout.localRanks);
  for (int q = 0; q < mh.layout.localRanks; ++q) {
    h.args.in[q] = mh.peerIn[q];
    h.args.slices[q] = mh.peerSlices[q];
  }
  h.scatter = out->l;
  h.scatter.vecs = 1;
  h.scatter.chunks = 1;
  hierarchicalScatterGeometry(mh.fabric, h.args.sliceElems, p.call.dtype, &h.scatter.blocks, &h.scatter.threads);
  h.scatter.pdl = p.plan.pdl;
  out->l.pdl = false;  // the gather follows NCCL's kernel, which triggers no dependents
  h.watch = mh.watch.get();
  return Status();
}

Status launch(const AlgoLaunch& c) {
  const HierLaunch& h = c.args<HierLaunch>();
  ARFUSE_CHECK(launchHierScatter(h.scatter, h.args, c.stream));
  float* slice = h.args.slices[h.args.k.rank];
  const size_t elems = static_cast<size_t>(h.args.sliceElems);
  NcclIssue op;
  op.info.op = "ncclAllReduce";
  op.info.path = "hierarchical";
  op.info.bytes = elems * sizeof(float);
  op.info.comm = h.args.k.rank;  // the local index: its communicator across hosts
  op.info.desc = h.args.k.desc;
  // The peers of this all-reduce (the same local index on the other hosts) enter it after their own
  // scatter barrier, which waits up to its timeout for a local peer that died: the watch allows them
  // that time, so that such a peer still arrives (with NaN) and names the dead rank itself, instead
  // of this rank giving up on it at the same moment and blaming it.
  op.info.peerWaitNs = h.args.k.timeoutNs;
  op.stream = c.stream;
  op.output = slice;
  op.outputBytes = op.info.bytes;
  ARFUSE_CHECK(h.watch->issue(
      op, [&](ncclComm_t nc) { return ncclAllReduce(slice, slice, elems, ncclFloat32, ncclSum, nc, c.stream); }));
  HierArgs gather = h.args;
  gather.k.desc.w0 |= 1u << 12;  // diag/device_records.h CallDesc: variant 1
  // The gather waits for local peers that may be stuck in the NCCL all-reduce above: bounded at that
  // all-reduce's watch bound plus its own timeout, so that such a peer's NCCL watch reports first
  // and this rank's message names whom it waits for across hosts, not only the local peer.
  gather.k.timeoutNs = h.watch->boundNs(op.info) + h.args.k.timeoutNs;
  ARFUSE_CHECK(launchHierGather(c.l, gather, c.stream));
  return Status();
}

// Its NCCL all-reduce sits between two kernels, which an NCCL group would reorder.
const char* const kNotInGroups =
    "a hierarchical-path call (a group that spans hosts) cannot be made inside arfuseGroupStart/End: its NCCL "
    "all-reduce sits between two kernels, which an NCCL group would reorder. Call it outside the group, or force "
    "algo=nccl";

[[maybe_unused]] const bool kBound =
    bindAlgoIssue(arfuseAlgoHierarchical, AlgoIssue{prepare, nullptr, launch, nullptr, kNotInGroups});

}  // namespace
}  // namespace arfuse
