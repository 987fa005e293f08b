// How every path launches a kernel: cudaLaunchKernelEx with a cluster dimension (split rows) and
// programmatic stream serialisation (PDL) when the plan asks for them. Included by the launch.cu
// files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "algos/launch.h"

namespace arfuse {

// A multi-rank kernel's launch (e: what cudaLaunchKernelEx returned).
inline Status kernelLaunchStatus(cudaError_t e, const Launch& l) {
  if (e == cudaSuccess) return Status();
  return ARFUSE_FAIL(arfuseCudaError, "kernel launch (%d x %d threads, %d chunks, %d vectors per thread) failed: %s",
                     l.blocks, l.threads, l.chunks, l.vecs, cudaGetErrorString(e));
}

// The single-GPU add+RMSNorm kernel's launch (the local path, the NCCL path's epilogue).
inline Status localLaunchStatus(cudaError_t e, const Launch& l) {
  if (e == cudaSuccess) return Status();
  return ARFUSE_FAIL(arfuseCudaError, "launch of add+rmsnorm (%d x %d threads, %d vectors per thread) failed: %s",
                     l.blocks, l.threads, l.vecs, cudaGetErrorString(e));
}

// CUDA's answer; launchMultiRank below (or the local path's launch.cu) makes it a Status with the
// message of its kind.
template <typename Args>
cudaError_t launchKernel(void (*kernel)(Args), const Launch& l, const Args& args, cudaStream_t stream) {
  if (!kernel) return cudaErrorInvalidDeviceFunction;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(l.blocks));
  cfg.blockDim = dim3(static_cast<unsigned>(l.threads));
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attrs[2];
  unsigned n = 0;
  if (l.chunks > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = static_cast<unsigned>(l.chunks);
    attrs[n].val.clusterDim.y = 1;
    attrs[n].val.clusterDim.z = 1;
    ++n;
  }
  if (l.pdl) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, args);
}

// A multi-rank path's kernel launch, as its launch.cu returns it.
template <typename Args>
Status launchMultiRank(void (*kernel)(Args), const Launch& l, const Args& args, cudaStream_t stream) {
  return kernelLaunchStatus(launchKernel(kernel, l, args, stream), l);
}

// Resident CTAs of `threads` (each kernel's largest block) per SM for a list of kernels, min'ed into
// `current` (0 on error).
template <typename Args, size_t N>
int minResident(int current, void (*const (&kernels)[N])(Args), int threads = kMaxThreads) {
  for (auto k : kernels) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, threads, 0) != cudaSuccess) return 0;
    current = std::min(current, n);
  }
  return current;
}

// Clusters of `chunks` CTAs of `threads` threads of `kernel` the device keeps resident at once.
template <typename Args>
int activeClusters(void (*kernel)(Args), int chunks, int threads) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(chunks * 64));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(chunks);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// The instantiation for a dtype.
template <template <typename> class Pick, typename... A>
auto pickByDtype(arfuseDataType_t dtype, A... a) -> decltype(Pick<float>::get(a...)) {
  switch (dtype) {
    case arfuseBfloat16:
      return Pick<__nv_bfloat16>::get(a...);
    case arfuseFloat16:
      return Pick<__half>::get(a...);
    case arfuseFloat32:
      return Pick<float>::get(a...);
    default:
      return nullptr;
  }
}

}  // namespace arfuse
