// The host-staged path: the one-shot and two-shot kernels over the group's pinned host exchange
// (device/exchange.cuh HostExchange), for ranks without peer access.
#include "algos/barrier_launch.cuh"

namespace arfuse {

int launchHostStaged(const Launch& l, bool twoShot, const KernelArgs& args, cudaStream_t stream) {
  return twoShot ? BarrierKernels<HostExchange, true>::launch(l, args, stream)
                 : BarrierKernels<HostExchange, false>::launch(l, args, stream);
}
// Each path measures the kernels its own file instantiates: measured here, the peer-access kernels were
// compiled a second time into this object (twice the device code of this file, the build's longest).
void residencyHostStaged(Residency* r) {
  BarrierKernels<HostExchange, false>::residentAll(r);
  BarrierKernels<HostExchange, true>::residentAll(r);
}

}  // namespace arfuse
