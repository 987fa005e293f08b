// Host entry points of the host-staged path: the one-shot or the two-shot kernels over the host exchange
// (algos/hoststaged/launch.cu). A launch's failure is arfuseCudaError with its geometry and CUDA's text.
#pragma once

#include "algos/launch.h"

namespace arfuse {

// twoShot: the two-shot kernels (Plan.variant). Instantiations as one-shot's and two-shot's.
Status launchHostStaged(const Launch& l, bool twoShot, const KernelArgs& args, cudaStream_t stream);
// Mins their residency into *r (narrow and wide classes, clusters).
void residencyHostStaged(Residency* r);

}  // namespace arfuse
