// The instantiations of a barrier path's kernels (one-shot, two-shot, over the peer or the host
// exchange), their launch and residency, shared by the one-shot, two-shot and host-staged launch.cu
// files. `Kernel` names the kernel: `Kernel<X, T, kFused, kVecs, kExt, kPush, kWide>::fn()` is that
// instantiation (each kernel.cuh names its own, OneShotKernel and TwoShotKernel, so that this file
// includes none).
#pragma once

#include "algos/launch_impl.cuh"
#include "device/exchange.cuh"

namespace arfuse {

using BarrierKernelFn = void (*)(KernelArgs);

template <template <class, typename, bool, int, bool, bool, bool> class Kernel, class X>
struct BarrierKernels {
  template <typename T, bool kFused, int kVecs, bool kExt = false, bool kPush = false, bool kWide = false>
  static BarrierKernelFn fn() {
    return Kernel<X, T, kFused, kVecs, kExt, kPush, kWide>::fn();
  }
  template <typename T>
  struct Pick {
    // wide: a launch of more than 256 threads (a whole row of more than 512 vectors); with 2 vectors
    // per thread that is the wide 2-vector instantiation (plan/plan.cc tileGeometry).
    static BarrierKernelFn get(KernelKind kind, int vecs, bool rowPush, bool wide) {
      switch (kind) {
        case kKindAllReduce:
          return vecs == 1 ? fn<T, false, 1>() : vecs == 8 ? fn<T, false, 8>() : nullptr;
        case kKindFused:
          if (rowPush)
            return vecs == 1 ? fn<T, true, 1, false, true>() : vecs == 2 ? fn<T, true, 2, false, true>() : nullptr;
          if (wide) return vecs == 2 ? fn<T, true, 2, false, false, true>() : vecs == 8 ? fn<T, true, 8>() : nullptr;
          return vecs == 1 ? fn<T, true, 1>() : vecs == 2 ? fn<T, true, 2>() : vecs == 8 ? fn<T, true, 8>() : nullptr;
        case kKindExtended:
          return vecs == 2 ? fn<T, true, 2, true>() : vecs == 8 ? fn<T, true, 8, true>() : nullptr;
      }
      return nullptr;
    }
  };
  template <typename T>
  static void resident(Residency* r) {
    BarrierKernelFn const narrow[] = {fn<T, false, 1>(),
                                      fn<T, true, 1>(),
                                      fn<T, true, 2>(),
                                      fn<T, true, 2, true>(),
                                      fn<T, true, 1, false, true>(),
                                      fn<T, true, 2, false, true>()};
    BarrierKernelFn const wide[] = {fn<T, false, 8>(), fn<T, true, 8>(), fn<T, true, 8, true>(),
                                    fn<T, true, 2, false, false, true>()};
    r->narrow = minResident(r->narrow, narrow, barrierMaxThreads(2));
    r->wide = minResident(r->wide, wide, barrierMaxThreads(8));
    // Split rows (chunks of at most 512 vectors, at most 256 threads) run the 1- and 2-vector fused kernels,
    // with the row push or without, and the 1- and 8-vector all-reduce ones (plan/plan.cc tileGeometry):
    // every one of them counts for this class's clusters.
    for (int c = 2; c <= kMaxChunks; c *= 2)
      for (BarrierKernelFn k : {fn<T, true, 1>(), fn<T, true, 2>(), fn<T, false, 1>(), fn<T, false, 8>(),
                                fn<T, true, 1, false, true>(), fn<T, true, 2, false, true>()})
        r->clusters[c] = std::min(r->clusters[c], activeClusters(k, c, barrierMaxThreads(1)));
  }
  static Status launch(const Launch& l, const KernelArgs& args, cudaStream_t stream) {
    return launchMultiRank(pickByDtype<Pick>(l.dtype, l.kind, l.vecs, l.rowPush, l.threads > barrierMaxThreads(2)), l,
                           args, stream);
  }
  static void residentAll(Residency* r) {
    resident<__nv_bfloat16>(r);
    resident<__half>(r);
    resident<float>(r);
  }
};

}  // namespace arfuse
