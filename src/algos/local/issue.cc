// The local path's steps, bound to its registry entry: one rank, no communication. The add+RMSNorm
// kernel, or for a plain all-reduce a copy (nothing in place). It also serves arfuseAddRmsNorm,
// which has no group (PrepareContext::g is null).
#include "algos/issue.h"

#include "algos/local/launch.h"
#include "algos/shared.h"

namespace arfuse {
namespace {

struct LocalPathArgs {
  LocalArgs la;
  bool fused;
  // The plain all-reduce: out = in
  const void* copySrc;
  void* copyDst;
  size_t copyBytes;
};

Status prepare(const PrepareContext& p, AlgoLaunch* out) {
  const Call& c = p.call;
  LocalPathArgs& a = out->args<LocalPathArgs>();
  a = LocalPathArgs{};
  a.la = localArgsOf(c, c.x);
  a.fused = c.fused;
  if (!c.fused && c.residualOut != c.x) {
    a.copySrc = c.x;
    a.copyDst = c.residualOut;
    a.copyBytes = static_cast<size_t>(c.tokens) * c.hidden * dtypeSize(c.dtype);
  }
  out->kernels = c.fused || a.copyBytes > 0;
  return Status();
}

Status launch(const AlgoLaunch& call) {
  const LocalPathArgs& a = call.args<LocalPathArgs>();
  if (a.fused) return launchLocal(call.l, a.la, call.stream);
  const cudaError_t e = cudaMemcpyAsync(a.copyDst, a.copySrc, a.copyBytes, cudaMemcpyDeviceToDevice, call.stream);
  if (e != cudaSuccess) return ARFUSE_FAIL(arfuseCudaError, "cudaMemcpyAsync: %s", cudaGetErrorString(e));
  return Status();
}

[[maybe_unused]] const bool kBound = bindAlgoIssue(arfuseAlgoLocal, AlgoIssue{prepare, nullptr, launch});

}  // namespace
}  // namespace arfuse
