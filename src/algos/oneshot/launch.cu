// Instantiations of the one-shot kernels over peer access, their launch and residency.
#include "algos/oneshot/kernels.cuh"
#include "algos/oneshot/launch.h"

namespace arfuse {

using OneShotPeer = BarrierKernels<OneShotKernels<PeerExchange>>;

Status launchOneShot(const Launch& l, const KernelArgs& args, cudaStream_t stream) {
  return kernelLaunchStatus(cudaError_t(OneShotPeer::launch(l, args, stream)), l);
}
void residencyOneShot(Residency* r) { OneShotPeer::residentAll(r); }

}  // namespace arfuse
