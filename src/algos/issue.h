// What every path's issue.cc shares (the library only): the launch step of a path whose kernel takes
// the KernelArgs its prepare built (a launch returns its own Status: algos/launch_impl.cuh). Each
// issue.cc binds its path's steps (prepare, the launch, ...) to the registry entry when the library
// loads:
//   const bool kBound = bindAlgoIssue(arfuseAlgoOneShot, AlgoIssue{prepare, nullptr, launch, ...});
#pragma once

#include <cuda_runtime.h>

#include "algos/registry.h"

namespace arfuse {

// The launch step of a path whose kernel takes the KernelArgs its prepare step built
// (init/group.h prepareMultiRankArgs), and of one with a variant too (Plan.variant).
template <Status (*Kernel)(const Launch&, const KernelArgs&, cudaStream_t)>
Status launchKernelArgs(const AlgoLaunch& c) {
  return Kernel(c.l, c.args<KernelArgs>(), c.stream);
}
template <Status (*Kernel)(const Launch&, bool, const KernelArgs&, cudaStream_t)>
Status launchKernelVariant(const AlgoLaunch& c) {
  return Kernel(c.l, c.variant, c.args<KernelArgs>(), c.stream);
}

}  // namespace arfuse
