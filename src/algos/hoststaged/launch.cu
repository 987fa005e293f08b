// The host-staged path: the one-shot and two-shot kernels over the group's pinned host exchange
// (device/exchange.cuh HostExchange), for ranks without peer access.
#include "algos/barrier_launch.cuh"

namespace arfuse {

int launchHostStaged(const Launch& l, bool twoShot, const KernelArgs& args, cudaStream_t stream) {
  return twoShot ? BarrierKernels<HostExchange, true>::launch(l, args, stream)
                 : BarrierKernels<HostExchange, false>::launch(l, args, stream);
}
int residentHostStaged(int current) {
  current = BarrierKernels<HostExchange, false>::residentAll(current);
  return current ? BarrierKernels<HostExchange, true>::residentAll(current) : 0;
}

}  // namespace arfuse
