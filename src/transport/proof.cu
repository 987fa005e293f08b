// The peer-access proof kernels of init (transport/proof.h).
#include <cuda_runtime.h>
#include <stdint.h>

#include "transport/proof.h"

namespace arfuse {
namespace {

__device__ __forceinline__ uint32_t proofWord(uint32_t seed, size_t i) {
  return (seed * 2654435761u) ^ static_cast<uint32_t>(i * 40503u + 1u);
}
__global__ void proofStoreKernel(uint32_t* dst, size_t words, uint32_t seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += gridDim.x * blockDim.x)
    reinterpret_cast<volatile uint32_t*>(dst)[i] = proofWord(seed, i);
}
__global__ void proofCheckKernel(const uint32_t* src, size_t words, uint32_t seed, unsigned* wrong) {
  unsigned bad = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += gridDim.x * blockDim.x)
    bad += reinterpret_cast<const volatile uint32_t*>(src)[i] != proofWord(seed, i);
  if (bad) atomicAdd(wrong, bad);
}

}  // namespace

cudaError_t launchProofStore(void* dst, size_t words, uint32_t seed) {
  proofStoreKernel<<<8, 256>>>(static_cast<uint32_t*>(dst), words, seed);
  return cudaGetLastError();
}
cudaError_t launchProofCheck(const void* src, size_t words, uint32_t seed, unsigned* wrong) {
  proofCheckKernel<<<8, 256>>>(static_cast<const uint32_t*>(src), words, seed, wrong);
  return cudaGetLastError();
}

}  // namespace arfuse
