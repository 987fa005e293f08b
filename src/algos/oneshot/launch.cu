// Instantiations of the one-shot kernels over peer access, their launch and residency.
#include "algos/barrier_launch.cuh"
#include "algos/oneshot/kernel.cuh"
#include "algos/oneshot/launch.h"

namespace arfuse {

using OneShotPeer = BarrierKernels<OneShotKernel, PeerExchange>;

Status launchOneShot(const Launch& l, const KernelArgs& args, cudaStream_t stream) {
  return OneShotPeer::launch(l, args, stream);
}
void residencyOneShot(Residency* r) { OneShotPeer::residentAll(r); }

}  // namespace arfuse
