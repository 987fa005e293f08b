// The SM copy of copy_kernel.h.
#include "harness/copy_kernel.h"

namespace arfuse {
namespace harness {

__global__ void copyKernel(uint4* __restrict__ dst, const uint4* __restrict__ src, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

int launchCopy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const size_t n = bytes / 16;
  size_t blocks = (n + 255) / 256;
  if (blocks > static_cast<size_t>(sms) * 8) blocks = static_cast<size_t>(sms) * 8;
  if (blocks == 0) blocks = 1;
  copyKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(static_cast<uint4*>(dst),
                                                                static_cast<const uint4*>(src), n);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace harness
}  // namespace arfuse
