// The hierarchical path's launch, bound to its registry entry: the reduce-scatter within the host,
// the all-reduce of this rank's fp32 slice across hosts, the gather + epilogue within the host, in
// stream order on the call's stream (algos/hierarchical/kernel.cuh). The gather kernel's descriptor
// says phase 2 (variant 1), so a rank in one phase can never pair with a peer in the other.
#include "algos/issue.h"

#include <nccl.h>

#include "algos/hierarchical/launch.h"

namespace arfuse {
namespace {

Status launch(const AlgoLaunch& c) {
  const HierLaunch& h = c.hier;
  ARFUSE_CHECK(kernelLaunchStatus(launchHierScatter(h.scatter, h.args, c.stream), h.scatter));
  float* slice = h.args.slices[h.args.k.rank];
  const ncclResult_t nr =
      ncclAllReduce(slice, slice, static_cast<size_t>(h.args.sliceElems), ncclFloat32, ncclSum, h.cross, c.stream);
  if (nr != ncclSuccess) return ARFUSE_FAIL(arfuseNcclError, "ncclAllReduce across hosts: %s", ncclGetErrorString(nr));
  HierArgs gather = h.args;
  gather.k.desc.w0 |= 1u << 12;  // diag/device_records.h CallDesc: variant 1
  ARFUSE_CHECK(kernelLaunchStatus(launchHierGather(c.l, gather, c.stream), c.l));
  return Status();
}

[[maybe_unused]] const bool kBound = bindAlgoLaunch(arfuseAlgoHierarchical, launch);

}  // namespace
}  // namespace arfuse
