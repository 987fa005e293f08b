// The host-staged path: the one-shot and two-shot kernels over the group's pinned host exchange
// (device/exchange.cuh HostExchange), for ranks without peer access; their launch and residency.
#include "algos/barrier_launch.cuh"
#include "algos/hoststaged/launch.h"
#include "algos/twoshot/kernel.cuh"

namespace arfuse {
namespace {

struct OneShotHost {
  template <typename T, bool kFused, int kVecs, bool kExt>
  static BarrierKernelFn fn() {
    return oneShotKernel<HostExchange, T, kFused, kVecs, kExt>;
  }
};
struct TwoShotHost {
  template <typename T, bool kFused, int kVecs, bool kExt>
  static BarrierKernelFn fn() {
    return twoShotKernel<HostExchange, T, kFused, kVecs, kExt>;
  }
};

}  // namespace

int launchHostStaged(const Launch& l, bool twoShot, const KernelArgs& args, cudaStream_t stream) {
  return twoShot ? BarrierKernels<TwoShotHost>::launch(l, args, stream)
                 : BarrierKernels<OneShotHost>::launch(l, args, stream);
}
void residencyHostStaged(Residency* r) {
  BarrierKernels<OneShotHost>::residentAll(r);
  BarrierKernels<TwoShotHost>::residentAll(r);
}

}  // namespace arfuse
