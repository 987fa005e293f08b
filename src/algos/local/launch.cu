// Instantiations of the single-GPU add+RMSNorm kernel, and its launch.
#include "algos/launch_impl.cuh"
#include "algos/local/kernel.cuh"
#include "algos/local/launch.h"

namespace arfuse {
namespace {

using LocalFn = void (*)(LocalArgs);

template <typename T>
struct PickLocal {
  static LocalFn get(KernelKind kind, int vecs) {
    if (kind == kKindExtended)
      return vecs == 2 ? addRmsNormKernel<T, 2, true> : vecs == 8 ? addRmsNormKernel<T, 8, true> : nullptr;
    if (kind == kKindAllReduce) return sumSourcesKernel<T>;
    if (kind != kKindFused) return nullptr;
    switch (vecs) {
      case 1:
        return addRmsNormKernel<T, 1>;
      case 2:
        return addRmsNormKernel<T, 2>;
      case 4:
        return addRmsNormKernel<T, 4>;
      case 8:
        return addRmsNormKernel<T, 8>;
      default:
        return nullptr;
    }
  }
};

}  // namespace

Status launchLocal(const Launch& l, const LocalArgs& args, cudaStream_t stream) {
  return localLaunchStatus(launchKernel(pickByDtype<PickLocal>(l.dtype, l.kind, l.vecs), l, args, stream), l);
}

}  // namespace arfuse
