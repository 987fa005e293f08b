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

int launchLowLatency(const Launch& l, const KernelArgs& args, cudaStream_t stream);
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

// The fewest blocks of kMaxThreads threads that every multi-rank kernel can keep resident per SM on
// the current device (0 on error).
int residentBlocksPerSm();
// Per path (each launch.cu): the same for its own kernels, min'ed into `current`.
int residentLowLatency(int current);
int residentOneShot(int current);
int residentTwoShot(int current);
int residentHostStaged(int current);

}  // namespace arfuse
