// How a path's kernel is launched (Launch: instantiation + geometry + cluster + PDL), and the
// residency query of init. No CUDA headers needed to include it.
#pragma once

#include "arfuse/arfuse.h"
#include "base/status.h"
#include "device/args.h"
#include "plan/plan.h"  // KernelResidency

typedef struct CUstream_st* cudaStream_t;

namespace arfuse {

// Which instantiation of a path runs a call, and how it is launched. Filled from the plan.
enum KernelKind { kKindAllReduce = 0, kKindFused = 1, kKindExtended = 2 };
struct Launch {
  arfuseDataType_t dtype = arfuseBfloat16;
  KernelKind kind = kKindFused;
  int vecs = 1;      // vectors per thread the instantiation caches (1, 2, 4 or 8; see each path)
  int blocks = 1;    // CTAs (a multiple of chunks)
  int threads = 32;  // per CTA, a multiple of 32
  int chunks = 1;    // > 1: CTAs launched as clusters of `chunks` (sm_90+)
  bool pdl = false;  // programmatic dependent launch (sm_90+)
  // Split rows (chunks > 1) of a fused call: the row-push instantiation (device/rowsum.cuh), whose
  // CTAs push their partial sums into each other's shared memory instead of a cluster barrier.
  bool rowPush = false;
};

// Each path declares its kernels' launch in its own folder (algos/<path>/launch.h) and binds it to its
// registry entry (issue.cc); the instantiations it has are listed there, and its plan.cc picks among
// them. A launch returns Status: arfuseCudaError with the geometry and CUDA's text (a launch asking
// for another count fails with cudaErrorInvalidDeviceFunction's).

// How many CTAs of each kernel class the current device keeps resident at once (plan/plan.h
// KernelResidency): the low-latency kernels (256 threads), the narrow one-shot / two-shot / host-staged
// ones (1 or 2 vectors per thread, 256 threads), the wide ones (8 vectors, 512 threads); per SM, the
// fewest over the class's instantiations. llClusters[c] / clusters[c] (c = 2, 4, 8): clusters of c CTAs
// of the low-latency kernels / of the barrier paths' split-row kernels the whole device keeps resident
// at once (cluster placement is per GPC, so this is less than SMs / c). Virtual ranks need every rank's
// CTAs of a call resident at once (they wait on each other); 0 everywhere on error. Each path's
// residency step mins its own kernels into its own class.
struct Residency : KernelResidency {
  Residency() {
    lowLatency = narrow = wide = 1 << 20;
    for (int c = 2; c <= kMaxChunks; c *= 2) llClusters[c] = clusters[c] = 1 << 20;
  }
  bool ok() const { return lowLatency > 0 && narrow > 0 && wide > 0; }
};
// Every path's kernels, through the residency step of its registry entry (algos/residency.cc).
Residency measureResidency();

}  // namespace arfuse
