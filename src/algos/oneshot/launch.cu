// Instantiations of the one-shot kernels over peer access, and their launch.
#include "algos/barrier_launch.cuh"

namespace arfuse {

int launchOneShot(const Launch& l, const KernelArgs& args, cudaStream_t stream) {
  return BarrierKernels<PeerExchange, false>::launch(l, args, stream);
}
void residencyOneShot(Residency* r) { BarrierKernels<PeerExchange, false>::residentAll(r); }

}  // namespace arfuse
