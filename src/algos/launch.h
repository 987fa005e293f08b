// Host-side entry points of the kernels, one per path (each implemented in its folder's launch.cu).
// No CUDA headers needed to call them. Each returns a cudaError_t value (as int) from the launch.
#pragma once

#include "arfuse/arfuse.h"
#include "device/args.h"

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
};

// twoPhase: the two-phase variant (push to the vector's owner, then the owner pushes the reduced value).
int launchLowLatency(const Launch& l, bool twoPhase, const KernelArgs& args, cudaStream_t stream);
int launchOneShot(const Launch& l, const KernelArgs& args, cudaStream_t stream);
int launchTwoShot(const Launch& l, const KernelArgs& args, cudaStream_t stream);
// Host-staged path: the one-shot or the two-shot kernels over the host exchange.
int launchHostStaged(const Launch& l, bool twoShot, const KernelArgs& args, cudaStream_t stream);
int launchLocal(const Launch& l, const LocalArgs& args, cudaStream_t stream);

// The vectors-per-thread instantiations each path has (plan/geometry.h picks among them):
//   low-latency (at most 256 threads): all-reduce 1, 2 or 4, fused 1, 2 or 4, extended 2 or 4;
//   one-shot, two-shot, host-staged: all-reduce 1 or 8, fused 1, 2 or 8, extended 2 or 8;
//   local: fused 1, 2, 4 or 8, extended 2 or 8; all-reduce: the sum of gathered sources (any vecs).
// A launch asking for another count fails with cudaErrorInvalidDeviceFunction.

// Peer-access proof at init (current device, default stream): stores a seeded pattern of `words`
// 32-bit words at dst / counts the words of src that differ from it into *wrong (device memory).
int launchProofStore(void* dst, size_t words, uint32_t seed);
int launchProofCheck(const void* src, size_t words, uint32_t seed, unsigned* wrong);

// How many CTAs of each kernel class the current device keeps resident at once, each class at its
// largest block: the low-latency kernels (256 threads), the narrow one-shot / two-shot / host-staged
// ones (1 or 2 vectors per thread, 256 threads), the wide ones (8 vectors, 512 threads); per SM, the
// fewest over the class's instantiations. clusters[c] (c = 2, 4, 8): clusters of c CTAs of the
// low-latency and narrow classes the whole device keeps resident at once (cluster placement is per
// GPC, so this is less than SMs / c). Virtual ranks need every rank's CTAs of a call resident at
// once (they wait on each other); 0 everywhere on error.
struct Residency {
  int lowLatency = 1 << 20;
  int narrow = 1 << 20;
  int wide = 1 << 20;
  int clusters[kMaxChunks + 1] = {};
  bool ok() const { return lowLatency > 0 && narrow > 0 && wide > 0; }
};
Residency measureResidency();
// Per path (each launch.cu): min its kernels into r.
void residencyLowLatency(Residency* r);
void residencyOneShot(Residency* r);
void residencyTwoShot(Residency* r);
void residencyHostStaged(Residency* r);

}  // namespace arfuse
