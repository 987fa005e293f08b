// Host entry points of the single-GPU add+RMSNorm kernel (the local path, and the NCCL path's epilogue)
// (algos/local/launch.cu). A launch's failure is arfuseCudaError with its geometry and CUDA's text.
#pragma once

#include "algos/launch.h"

namespace arfuse {

// Instantiations: fused 1, 2, 4 or 8 vectors per thread, extended 2 or 8; all-reduce: the sum of
// gathered sources (any vecs).
Status launchLocal(const Launch& l, const LocalArgs& args, cudaStream_t stream);

}  // namespace arfuse
