// Instantiations of the two-shot kernels over peer access, their launch and residency.
#include "algos/barrier_launch.cuh"
#include "algos/twoshot/kernel.cuh"
#include "algos/twoshot/launch.h"

namespace arfuse {
namespace {

struct TwoShotPeer {
  template <typename T, bool kFused, int kVecs, bool kExt>
  static BarrierKernelFn fn() {
    return twoShotKernel<PeerExchange, T, kFused, kVecs, kExt>;
  }
};

}  // namespace

int launchTwoShot(const Launch& l, const KernelArgs& args, cudaStream_t stream) {
  return BarrierKernels<TwoShotPeer>::launch(l, args, stream);
}
void residencyTwoShot(Residency* r) { BarrierKernels<TwoShotPeer>::residentAll(r); }

}  // namespace arfuse
