// The host-staged path: the one-shot and two-shot kernels over the group's pinned host exchange
// (device/exchange.cuh HostExchange), for ranks without peer access; their launch and residency.
#include "algos/barrier_launch.cuh"
#include "algos/hoststaged/launch.h"
#include "algos/oneshot/kernel.cuh"
#include "algos/twoshot/kernel.cuh"

namespace arfuse {

using OneShotHost = BarrierKernels<OneShotKernel, HostExchange>;
using TwoShotHost = BarrierKernels<TwoShotKernel, HostExchange>;

Status launchHostStaged(const Launch& l, bool twoShot, const KernelArgs& args, cudaStream_t stream) {
  return twoShot ? TwoShotHost::launch(l, args, stream) : OneShotHost::launch(l, args, stream);
}
void residencyHostStaged(Residency* r) {
  OneShotHost::residentAll(r);
  TwoShotHost::residentAll(r);
}

}  // namespace arfuse
