// Instantiations of the low-latency kernels (bf16, fp16, fp32) and their launch.
#include "algos/launch_impl.cuh"
#include "algos/lowlatency/kernel.cuh"

namespace arfuse {
namespace {

using KernelFn = void (*)(KernelArgs);

template <typename T>
struct PickLl {
  static KernelFn get(KernelKind kind, int vecs) {
    switch (kind) {
      case kKindAllReduce:
        return vecs == 1 ? lowLatencyKernel<T, false, 1>
               : vecs == 2 ? lowLatencyKernel<T, false, 2>
               : vecs == 4 ? lowLatencyKernel<T, false, 4>
                           : nullptr;
      case kKindFused:
        return vecs == 1 ? lowLatencyKernel<T, true, 1>
               : vecs == 2 ? lowLatencyKernel<T, true, 2>
               : vecs == 4 ? lowLatencyKernel<T, true, 4>
                           : nullptr;
      case kKindExtended:
        return vecs == 2 ? lowLatencyKernel<T, true, 2, true> : vecs == 4 ? lowLatencyKernel<T, true, 4, true> : nullptr;
    }
    return nullptr;
  }
};

template <typename T>
int resident(int current) {
  KernelFn const kernels[] = {lowLatencyKernel<T, false, 1>,      lowLatencyKernel<T, false, 2>,
                              lowLatencyKernel<T, false, 4>,      lowLatencyKernel<T, true, 1>,
                              lowLatencyKernel<T, true, 2>,       lowLatencyKernel<T, true, 4>,
                              lowLatencyKernel<T, true, 2, true>, lowLatencyKernel<T, true, 4, true>};
  return minResident(current, kernels, kLlMaxThreads);
}

}  // namespace

int launchLowLatency(const Launch& l, const KernelArgs& args, cudaStream_t stream) {
  return launchKernel(pickByDtype<PickLl>(l.dtype, l.kind, l.vecs), l, args, stream);
}

int residentLowLatency(int current) {
  current = resident<__nv_bfloat16>(current);
  if (current) current = resident<__half>(current);
  if (current) current = resident<float>(current);
  return current;
}

}  // namespace arfuse
