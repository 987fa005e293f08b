// Host entry points of the one-shot kernels over peer access (algos/oneshot/launch.cu). A launch's
// failure is arfuseCudaError with its geometry and CUDA's text (algos/launch_impl.cuh).
#pragma once

#include "algos/launch.h"

namespace arfuse {

// Instantiations: all-reduce 1 or 8 vectors per thread, fused 1, 2 or 8, extended 2 or 8.
Status launchOneShot(const Launch& l, const KernelArgs& args, cudaStream_t stream);
// Mins their residency into *r (narrow and wide classes, clusters).
void residencyOneShot(Residency* r);

}  // namespace arfuse
