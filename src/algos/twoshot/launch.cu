// Instantiations of the two-shot kernels over peer access, and their launch.
#include "algos/barrier_launch.cuh"

namespace arfuse {

int launchTwoShot(const Launch& l, const KernelArgs& args, cudaStream_t stream) {
  return BarrierKernels<PeerExchange, true>::launch(l, args, stream);
}
void residencyTwoShot(Residency* r) { BarrierKernels<PeerExchange, true>::residentAll(r); }

}  // namespace arfuse
