// Host entry points of the low-latency kernels (algos/lowlatency/launch.cu). A launch's failure is
// arfuseCudaError with its geometry and CUDA's text (algos/launch_impl.cuh).
#pragma once

#include "algos/launch.h"

namespace arfuse {

// twoPhase: the two-phase variant (push to the vector's owner, then the owner pushes the reduced
// value). Instantiations (at most 256 threads): all-reduce 1, 2 or 4 vectors per thread, fused 1, 2
// or 4, extended 2 or 4.
Status launchLowLatency(const Launch& l, bool twoPhase, const KernelArgs& args, cudaStream_t stream);
// Mins their residency into *r (the low-latency class, clusters).
void residencyLowLatency(Residency* r);

}  // namespace arfuse
