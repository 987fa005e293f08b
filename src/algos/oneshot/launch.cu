// Instantiations of the one-shot kernels over peer access, their launch and residency.
#include "algos/oneshot/kernels.cuh"
#include "algos/oneshot/launch.h"

namespace arfuse {

using OneShotPeer = BarrierKernels<OneShotKernels<PeerExchange>>;

int launchOneShot(const Launch& l, const KernelArgs& args, cudaStream_t stream) {
  return OneShotPeer::launch(l, args, stream);
}
void residencyOneShot(Residency* r) { OneShotPeer::residentAll(r); }

}  // namespace arfuse
