// Instantiations of the hierarchical path's intra-host kernels, and their launch.
#include "algos/hierarchical/kernel.cuh"
#include "algos/hierarchical/launch.h"
#include "algos/launch_impl.cuh"

namespace arfuse {
namespace {

using HierKernelFn = void (*)(HierArgs);

template <typename T>
struct PickScatter {
  static HierKernelFn get() { return hierReduceScatterKernel<T>; }
};

template <typename T>
struct PickGather {
  static HierKernelFn get(bool fused, int vecs) {
    if (fused)
      return vecs == 1   ? hierGatherKernel<T, true, 1>
             : vecs == 2 ? hierGatherKernel<T, true, 2>
             : vecs == 8 ? hierGatherKernel<T, true, 8>
                         : nullptr;
    return vecs == 1 ? hierGatherKernel<T, false, 1> : vecs == 8 ? hierGatherKernel<T, false, 8> : nullptr;
  }
};

}  // namespace

Status launchHierScatter(const Launch& l, const HierArgs& args, cudaStream_t stream) {
  return launchMultiRank(pickByDtype<PickScatter>(l.dtype), l, args, stream);
}

Status launchHierGather(const Launch& l, const HierArgs& args, cudaStream_t stream) {
  return launchMultiRank(pickByDtype<PickGather>(l.dtype, l.kind != kKindAllReduce, l.vecs), l, args, stream);
}

}  // namespace arfuse
