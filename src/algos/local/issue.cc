// The local path's launch, bound to its registry entry: the add+RMSNorm kernel, or for a plain
// all-reduce of one rank a copy (nothing in place).
#include "algos/issue.h"

namespace arfuse {
namespace {

Status launch(const AlgoLaunch& c) {
  if (c.fused) return localLaunchStatus(launchLocal(c.l, c.la, c.stream), c.l);
  if (c.copyBytes == 0) return Status();
  const cudaError_t e = cudaMemcpyAsync(c.copyDst, c.copySrc, c.copyBytes, cudaMemcpyDeviceToDevice, c.stream);
  if (e != cudaSuccess) return ARFUSE_FAIL(arfuseCudaError, "cudaMemcpyAsync: %s", cudaGetErrorString(e));
  return Status();
}

[[maybe_unused]] const bool kBound = bindAlgoLaunch(arfuseAlgoLocal, launch);

}  // namespace
}  // namespace arfuse
