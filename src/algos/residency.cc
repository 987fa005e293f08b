// measureResidency (algos/launch.h): every path's kernels that must be co-resident, through the
// residency step its issue.cc bound to its registry entry.
#include <cuda_runtime.h>

#include "algos/launch.h"
#include "algos/registry.h"

namespace arfuse {

Residency measureResidency() {
  Residency r;
  for (const AlgoEntry& e : algoRegistry())
    if (e.issue.residency) e.issue.residency(&r);
  int major = 0, device = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  for (int c = 2; c <= kMaxChunks; c *= 2)
    for (int* n : {&r.clusters[c], &r.llClusters[c]})
      if (major < 9 || *n >= (1 << 20)) *n = 0;  // no clusters before sm_90
  return r;
}

}  // namespace arfuse
