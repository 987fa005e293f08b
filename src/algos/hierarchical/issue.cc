// The hierarchical path's launch, bound to its registry entry: the reduce-scatter within the host,
// the all-reduce of this rank's fp32 slice across hosts, the gather + epilogue within the host, in
// stream order on the call's stream (algos/hierarchical/kernel.cuh). The gather kernel's descriptor
// says phase 2 (variant 1), so a rank in one phase can never pair with a peer in the other.
#include "algos/issue.h"

#include <nccl.h>

#include "algos/hierarchical/launch.h"
#include "comm/multihost_watch.h"

namespace arfuse {
namespace {

Status launch(const AlgoLaunch& c) {
  const HierLaunch& h = c.hier;
  ARFUSE_CHECK(kernelLaunchStatus(launchHierScatter(h.scatter, h.args, c.stream), h.scatter));
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
  ARFUSE_CHECK(kernelLaunchStatus(launchHierGather(c.l, gather, c.stream), c.l));
  return Status();
}

[[maybe_unused]] const bool kBound = bindAlgoLaunch(arfuseAlgoHierarchical, launch);

}  // namespace
}  // namespace arfuse
