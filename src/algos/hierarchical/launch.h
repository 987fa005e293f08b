// Host entry points of the hierarchical path's kernels (algos/hierarchical/kernel.cuh). Each returns
// a cudaError_t value (as int). The gather kernel has the fused instantiations 1, 2 and 8 vectors
// per thread and the all-reduce ones 1 and 8 (algos/hierarchical/plan.h picks); never clusters.
#pragma once

#include "algos/hierarchical/args.h"
#include "algos/launch.h"

namespace arfuse {

int launchHierScatter(const Launch& l, const HierArgs& args, cudaStream_t stream);
int launchHierGather(const Launch& l, const HierArgs& args, cudaStream_t stream);

}  // namespace arfuse
