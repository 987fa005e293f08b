// Host-side entry points of the kernels (implemented in kernels.cu). No CUDA headers needed to call.
#pragma once

#include "arfuse/arfuse.h"
#include "kernels/kernel_args.h"

typedef struct CUstream_st* cudaStream_t;

namespace arfuse {

// Each returns a cudaError_t value (as int) from the launch.
// ext: the extended epilogue (args.ext; arfuseAllReduceEpilogue), fused only.
int launchOneShot(arfuseDataType_t dtype, bool fused, const KernelArgs& args, int blocks, int threads,
                  cudaStream_t stream, bool ext = false);
int launchTwoShot(arfuseDataType_t dtype, bool fused, const KernelArgs& args, int blocks, int threads,
                  cudaStream_t stream, bool ext = false);
int launchLowLatency(arfuseDataType_t dtype, bool fused, const KernelArgs& args, int blocks, int threads,
                     cudaStream_t stream, bool ext = false);
// Host-staged path: the one-shot or the two-shot variant (hoststaged.cuh).
int launchHostStaged(arfuseDataType_t dtype, bool fused, bool twoShot, const KernelArgs& args, int blocks,
                     int threads, cudaStream_t stream, bool ext = false);
int launchAddRmsNorm(arfuseDataType_t dtype, const LocalArgs& args, int blocks, int threads, cudaStream_t stream,
                     bool ext = false);

// Peer-access proof at init (current device, default stream): stores a seeded pattern of `words`
// 32-bit words at dst / counts the words of src that differ from it into *wrong (device memory).
int launchProofStore(void* dst, size_t words, uint32_t seed);
int launchProofCheck(const void* src, size_t words, uint32_t seed, unsigned* wrong);

// The fewest blocks of kMaxThreads threads that every multi-rank kernel can keep resident per SM on
// the current device (0 on error).
int residentBlocksPerSm();

}  // namespace arfuse
