// What every path's issue.cc shares (the library only): the Status of a kernel launch (CUDA's error
// text). Each issue.cc binds its path's steps (prepare, the launch, ...) to the registry entry when
// the library loads:
//   const bool kBound = bindAlgoIssue(arfuseAlgoOneShot, AlgoIssue{prepare, nullptr, launch, ...});
#pragma once

#include <cuda_runtime.h>

#include "algos/registry.h"

namespace arfuse {

// A multi-rank kernel's launch (e: the cudaError_t value the launch returned).
inline Status kernelLaunchStatus(int e, const Launch& l) {
  if (e == cudaSuccess) return Status();
  return ARFUSE_FAIL(arfuseCudaError, "kernel launch (%d x %d threads, %d chunks, %d vectors per thread) failed: %s",
                     l.blocks, l.threads, l.chunks, l.vecs, cudaGetErrorString(cudaError_t(e)));
}

// The single-GPU add+RMSNorm kernel's launch (the local path, the NCCL path's epilogue).
inline Status localLaunchStatus(int e, const Launch& l) {
  if (e == cudaSuccess) return Status();
  return ARFUSE_FAIL(arfuseCudaError, "launch of add+rmsnorm (%d x %d threads, %d vectors per thread) failed: %s",
                     l.blocks, l.threads, l.vecs, cudaGetErrorString(cudaError_t(e)));
}

// The launch step of a path whose kernel takes the KernelArgs its prepare step built
// (init/group.h prepareMultiRankArgs), and of one with a variant too (Plan.variant).
template <int (*Kernel)(const Launch&, const KernelArgs&, cudaStream_t)>
Status launchKernelArgs(const AlgoLaunch& c) {
  return kernelLaunchStatus(Kernel(c.l, c.args<KernelArgs>(), c.stream), c.l);
}
template <int (*Kernel)(const Launch&, bool, const KernelArgs&, cudaStream_t)>
Status launchKernelVariant(const AlgoLaunch& c) {
  return kernelLaunchStatus(Kernel(c.l, c.variant, c.args<KernelArgs>(), c.stream), c.l);
}

}  // namespace arfuse
