// Instantiations of the two-shot kernels over peer access, their launch and residency.
#include "algos/barrier_launch.cuh"
#include "algos/twoshot/kernel.cuh"
#include "algos/twoshot/launch.h"

namespace arfuse {

using TwoShotPeer = BarrierKernels<TwoShotKernel, PeerExchange>;

Status launchTwoShot(const Launch& l, const KernelArgs& args, cudaStream_t stream) {
  return TwoShotPeer::launch(l, args, stream);
}
void residencyTwoShot(Residency* r) { TwoShotPeer::residentAll(r); }

}  // namespace arfuse
