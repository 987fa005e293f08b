// Instantiations of the one-shot / two-shot kernels over an exchange (peer or host), shared by the
// one-shot, two-shot and host-staged launch.cu files.
#pragma once

#include "algos/launch_impl.cuh"
#include "algos/twoshot/kernel.cuh"

namespace arfuse {

using BarrierKernelFn = void (*)(KernelArgs);

template <class X, bool kTwoShot>
struct BarrierKernels {
  template <typename T, bool kFused, int kVecs, bool kExt = false>
  static BarrierKernelFn fn() {
    if constexpr (kTwoShot)
      return twoShotKernel<X, T, kFused, kVecs, kExt>;
    else
      return oneShotKernel<X, T, kFused, kVecs, kExt>;
  }
  template <typename T>
  struct Pick {
    static BarrierKernelFn get(KernelKind kind, int vecs) {
      switch (kind) {
        case kKindAllReduce:
          return vecs == 1 ? fn<T, false, 1>() : vecs == 8 ? fn<T, false, 8>() : nullptr;
        case kKindFused:
          return vecs == 1 ? fn<T, true, 1>() : vecs == 2 ? fn<T, true, 2>() : vecs == 8 ? fn<T, true, 8>() : nullptr;
        case kKindExtended:
          return vecs == 2 ? fn<T, true, 2, true>() : vecs == 8 ? fn<T, true, 8, true>() : nullptr;
      }
      return nullptr;
    }
  };
  template <typename T>
  static int resident(int current) {
    BarrierKernelFn const small[] = {fn<T, false, 1>(), fn<T, true, 1>(), fn<T, true, 2>(), fn<T, true, 2, true>()};
    BarrierKernelFn const large[] = {fn<T, false, 8>(), fn<T, true, 8>(), fn<T, true, 8, true>()};
    current = minResident(current, small, barrierMaxThreads(2));
    return current ? minResident(current, large, barrierMaxThreads(8)) : 0;
  }
  static int launch(const Launch& l, const KernelArgs& args, cudaStream_t stream) {
    return launchKernel(pickByDtype<Pick>(l.dtype, l.kind, l.vecs), l, args, stream);
  }
  static int residentAll(int current) {
    current = resident<__nv_bfloat16>(current);
    if (current) current = resident<__half>(current);
    if (current) current = resident<float>(current);
    return current;
  }
};

}  // namespace arfuse
