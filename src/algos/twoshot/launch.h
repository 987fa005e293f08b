// Host entry points of the two-shot kernels over peer access (algos/twoshot/launch.cu). A launch's
// failure is arfuseCudaError with its geometry and CUDA's text (algos/launch_impl.cuh).
#pragma once

#include "algos/launch.h"

namespace arfuse {

// Instantiations: all-reduce 1 or 8 vectors per thread, fused 1, 2 or 8, extended 2 or 8.
Status launchTwoShot(const Launch& l, const KernelArgs& args, cudaStream_t stream);
// Mins their residency into *r (narrow and wide classes, clusters).
void residencyTwoShot(Residency* r);

}  // namespace arfuse
