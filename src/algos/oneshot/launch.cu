// Instantiations of the one-shot kernels over peer access, their launch and residency.
#include "algos/barrier_launch.cuh"
#include "algos/oneshot/kernel.cuh"
#include "algos/oneshot/launch.h"

namespace arfuse {
namespace {

struct OneShotPeer {
  template <typename T, bool kFused, int kVecs, bool kExt>
  static BarrierKernelFn fn() {
    return oneShotKernel<PeerExchange, T, kFused, kVecs, kExt>;
  }
};

}  // namespace

int launchOneShot(const Launch& l, const KernelArgs& args, cudaStream_t stream) {
  return BarrierKernels<OneShotPeer>::launch(l, args, stream);
}
void residencyOneShot(Residency* r) { BarrierKernels<OneShotPeer>::residentAll(r); }

}  // namespace arfuse
