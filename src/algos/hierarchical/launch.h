// Host entry points of the hierarchical path's kernels (algos/hierarchical/kernel.cuh). A launch's
// failure is arfuseCudaError with its geometry and CUDA's text. The gather kernel has the fused instantiations 1, 2 and
// 8 vectors per thread and the all-reduce ones 1 and 8 (algos/hierarchical/plan.h picks); never clusters.
#pragma once

#include "algos/hierarchical/args.h"
#include "algos/launch.h"

namespace arfuse {

Status launchHierScatter(const Launch& l, const HierArgs& args, cudaStream_t stream);
Status launchHierGather(const Launch& l, const HierArgs& args, cudaStream_t stream);

}  // namespace arfuse
