// Instantiates the kernels (only the dtypes we test: bf16, fp16, fp32) and launches them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/addrmsnorm.cuh"
#include "kernels/hoststaged.cuh"
#include "kernels/launch.h"
#include "kernels/lowlatency.cuh"
#include "kernels/twoshot.cuh"

namespace arfuse {
namespace {

template <template <typename> class Fn, typename... Args>
int dispatch(arfuseDataType_t dtype, Args&&... args) {
  switch (dtype) {
    case arfuseBfloat16:
      return Fn<__nv_bfloat16>::run(args...);
    case arfuseFloat16:
      return Fn<__half>::run(args...);
    case arfuseFloat32:
      return Fn<float>::run(args...);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

template <typename T>
struct OneShot {
  static int run(bool fused, const KernelArgs& a, int blocks, int threads, cudaStream_t s) {
    if (fused) {
      oneShotKernel<T, true><<<blocks, threads, 0, s>>>(a);
    } else {
      oneShotKernel<T, false><<<blocks, threads, 0, s>>>(a);
    }
    return static_cast<int>(cudaGetLastError());
  }
};

template <typename T>
struct TwoShot {
  static int run(bool fused, const KernelArgs& a, int blocks, int threads, cudaStream_t s) {
    if (fused) {
      twoShotKernel<T, true><<<blocks, threads, 0, s>>>(a);
    } else {
      twoShotKernel<T, false><<<blocks, threads, 0, s>>>(a);
    }
    return static_cast<int>(cudaGetLastError());
  }
};

template <typename T>
struct LowLatency {
  static int run(bool fused, const KernelArgs& a, int blocks, int threads, cudaStream_t s) {
    if (fused) {
      lowLatencyKernel<T, true><<<blocks, threads, 0, s>>>(a);
    } else {
      lowLatencyKernel<T, false><<<blocks, threads, 0, s>>>(a);
    }
    return static_cast<int>(cudaGetLastError());
  }
};

template <typename T>
struct HostStaged {
  static int run(bool fused, bool twoShot, const KernelArgs& a, int blocks, int threads, cudaStream_t s) {
    if (twoShot) {
      if (fused)
        hostTwoShotKernel<T, true><<<blocks, threads, 0, s>>>(a);
      else
        hostTwoShotKernel<T, false><<<blocks, threads, 0, s>>>(a);
    } else {
      if (fused)
        hostOneShotKernel<T, true><<<blocks, threads, 0, s>>>(a);
      else
        hostOneShotKernel<T, false><<<blocks, threads, 0, s>>>(a);
    }
    return static_cast<int>(cudaGetLastError());
  }
};

template <typename T>
struct Local {
  static int run(const LocalArgs& a, int blocks, int threads, cudaStream_t s) {
    const int nvec = a.hidden / Vec<T>::kElems;
    if (nvec <= 4 * threads)
      addRmsNormKernel<T, 4><<<blocks, threads, 0, s>>>(a);
    else
      addRmsNormKernel<T, kMaxVecsPerThread><<<blocks, threads, 0, s>>>(a);
    return static_cast<int>(cudaGetLastError());
  }
};

template <typename T>
int minResident(int current) {
  const void* kernels[] = {reinterpret_cast<const void*>(oneShotKernel<T, true>),
                           reinterpret_cast<const void*>(oneShotKernel<T, false>),
                           reinterpret_cast<const void*>(twoShotKernel<T, true>),
                           reinterpret_cast<const void*>(twoShotKernel<T, false>),
                           reinterpret_cast<const void*>(lowLatencyKernel<T, true>),
                           reinterpret_cast<const void*>(lowLatencyKernel<T, false>),
                           reinterpret_cast<const void*>(hostOneShotKernel<T, true>),
                           reinterpret_cast<const void*>(hostOneShotKernel<T, false>),
                           reinterpret_cast<const void*>(hostTwoShotKernel<T, true>),
                           reinterpret_cast<const void*>(hostTwoShotKernel<T, false>)};
  for (const void* k : kernels) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, kMaxThreads, 0) != cudaSuccess) return 0;
    current = std::min(current, n);
  }
  return current;
}

}  // namespace

int launchOneShot(arfuseDataType_t dtype, bool fused, const KernelArgs& args, int blocks, int threads,
                  cudaStream_t stream) {
  return dispatch<OneShot>(dtype, fused, args, blocks, threads, stream);
}
int launchTwoShot(arfuseDataType_t dtype, bool fused, const KernelArgs& args, int blocks, int threads,
                  cudaStream_t stream) {
  return dispatch<TwoShot>(dtype, fused, args, blocks, threads, stream);
}
int launchLowLatency(arfuseDataType_t dtype, bool fused, const KernelArgs& args, int blocks, int threads,
                     cudaStream_t stream) {
  return dispatch<LowLatency>(dtype, fused, args, blocks, threads, stream);
}
int launchHostStaged(arfuseDataType_t dtype, bool fused, bool twoShot, const KernelArgs& args, int blocks,
                     int threads, cudaStream_t stream) {
  return dispatch<HostStaged>(dtype, fused, twoShot, args, blocks, threads, stream);
}
int launchAddRmsNorm(arfuseDataType_t dtype, const LocalArgs& args, int blocks, int threads, cudaStream_t stream) {
  return dispatch<Local>(dtype, args, blocks, threads, stream);
}

int residentBlocksPerSm() {
  int n = 1 << 20;
  n = minResident<__nv_bfloat16>(n);
  if (n) n = minResident<__half>(n);
  if (n) n = minResident<float>(n);
  return n;
}

}  // namespace arfuse
