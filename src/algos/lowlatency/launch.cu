// Instantiations of the low-latency kernels (bf16, fp16, fp32) and their launch.
#include "algos/launch_impl.cuh"
#include "algos/lowlatency/kernel.cuh"
#include "algos/lowlatency/launch.h"

namespace arfuse {
namespace {

using KernelFn = void (*)(KernelArgs);

template <typename T>
struct PickLl {
  static KernelFn get(KernelKind kind, int vecs, bool twoPhase, bool rowPush) {
    if (rowPush && kind == kKindFused)  // split rows: 1 or 2 vectors (tiles of at most 512 vectors)
      return twoPhase ? (vecs == 1   ? lowLatencyKernel<T, true, 1, false, true, true>
                         : vecs == 2 ? lowLatencyKernel<T, true, 2, false, true, true>
                                     : nullptr)
                      : (vecs == 1   ? lowLatencyKernel<T, true, 1, false, false, true>
                         : vecs == 2 ? lowLatencyKernel<T, true, 2, false, false, true>
                                     : nullptr);
    if (twoPhase) {  // fused and all-reduce only (the plan never picks it for extended calls)
      if (kind == kKindAllReduce)
        return vecs == 1   ? lowLatencyKernel<T, false, 1, false, true>
               : vecs == 2 ? lowLatencyKernel<T, false, 2, false, true>
               : vecs == 4 ? lowLatencyKernel<T, false, 4, false, true>
                           : nullptr;
      if (kind == kKindFused)
        return vecs == 1   ? lowLatencyKernel<T, true, 1, false, true>
               : vecs == 2 ? lowLatencyKernel<T, true, 2, false, true>
               : vecs == 4 ? lowLatencyKernel<T, true, 4, false, true>
                           : nullptr;
      return nullptr;
    }
    switch (kind) {
      case kKindAllReduce:
        return vecs == 1   ? lowLatencyKernel<T, false, 1>
               : vecs == 2 ? lowLatencyKernel<T, false, 2>
               : vecs == 4 ? lowLatencyKernel<T, false, 4>
                           : nullptr;
      case kKindFused:
        return vecs == 1   ? lowLatencyKernel<T, true, 1>
               : vecs == 2 ? lowLatencyKernel<T, true, 2>
               : vecs == 4 ? lowLatencyKernel<T, true, 4>
                           : nullptr;
      case kKindExtended:
        return vecs == 2   ? lowLatencyKernel<T, true, 2, true>
               : vecs == 4 ? lowLatencyKernel<T, true, 4, true>
                           : nullptr;
    }
    return nullptr;
  }
};

template <typename T>
void resident(Residency* r) {
  KernelFn const kernels[] = {lowLatencyKernel<T, false, 1>,
                              lowLatencyKernel<T, false, 2>,
                              lowLatencyKernel<T, false, 4>,
                              lowLatencyKernel<T, true, 1>,
                              lowLatencyKernel<T, true, 2>,
                              lowLatencyKernel<T, true, 4>,
                              lowLatencyKernel<T, true, 2, true>,
                              lowLatencyKernel<T, true, 4, true>,
                              lowLatencyKernel<T, false, 1, false, true>,
                              lowLatencyKernel<T, false, 2, false, true>,
                              lowLatencyKernel<T, false, 4, false, true>,
                              lowLatencyKernel<T, true, 1, false, true>,
                              lowLatencyKernel<T, true, 2, false, true>,
                              lowLatencyKernel<T, true, 4, false, true>,
                              lowLatencyKernel<T, true, 1, false, false, true>,
                              lowLatencyKernel<T, true, 2, false, false, true>,
                              lowLatencyKernel<T, true, 1, false, true, true>,
                              lowLatencyKernel<T, true, 2, false, true, true>};
  r->lowLatency = minResident(r->lowLatency, kernels, kLlMaxThreads);
  // Split rows (chunks of at most 512 vectors on at most 256 threads) run the 1- and 2-vector kernels,
  // one- and two-phase, fused ones with the row push or without: every one counts for this class's clusters.
  for (int c = 2; c <= kMaxChunks; c *= 2)
    for (KernelFn k :
         {lowLatencyKernel<T, true, 1>, lowLatencyKernel<T, false, 1>, lowLatencyKernel<T, true, 1, false, true>,
          lowLatencyKernel<T, false, 1, false, true>, lowLatencyKernel<T, true, 1, false, false, true>,
          lowLatencyKernel<T, true, 1, false, true, true>, lowLatencyKernel<T, true, 2>, lowLatencyKernel<T, false, 2>,
          lowLatencyKernel<T, true, 2, false, true>, lowLatencyKernel<T, false, 2, false, true>,
          lowLatencyKernel<T, true, 2, false, false, true>, lowLatencyKernel<T, true, 2, false, true, true>})
      r->llClusters[c] = std::min(r->llClusters[c], activeClusters(k, c, kLlMaxThreads));
}

}  // namespace

Status launchLowLatency(const Launch& l, bool twoPhase, const KernelArgs& args, cudaStream_t stream) {
  return launchMultiRank(pickByDtype<PickLl>(l.dtype, l.kind, l.vecs, twoPhase, l.rowPush), l, args, stream);
}

void residencyLowLatency(Residency* r) {
  resident<__nv_bfloat16>(r);
  resident<__half>(r);
  resident<float>(r);
}

}  // namespace arfuse
