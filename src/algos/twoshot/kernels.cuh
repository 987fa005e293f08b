// The two-shot kernel over an exchange X (device/exchange.cuh: peer or host), as BarrierKernels
// (algos/barrier_launch.cuh) names its instantiations: for this path's launch.cu and host-staged's.
#pragma once

#include "algos/barrier_launch.cuh"
#include "algos/twoshot/kernel.cuh"

namespace arfuse {

template <class X>
struct TwoShotKernels {
  template <typename T, bool kFused, int kVecs, bool kExt, bool kPush>
  static BarrierKernelFn fn() {
    return twoShotKernel<X, T, kFused, kVecs, kExt, kPush>;
  }
};

}  // namespace arfuse
