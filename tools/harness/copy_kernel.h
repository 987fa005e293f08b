// The bandwidth floor for memory-bound kernels: a plain 16-byte-vector grid-stride copy on the SMs
// (a graph memcpy node may run on the copy engines, which is not the ceiling our kernels face).
// Used by `arfuse bench` (the single-GPU rows' copy) and arfuse_proxy_floor (the copy rates of the
// call's own GPU that scripts/perf_compare.py divides the floors' bytes by).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace arfuse {
namespace harness {

// Copies `bytes` (a multiple of 16, both pointers 16-byte aligned) from src to dst on `stream`, with up
// to 8 CTAs of 256 threads per SM. Returns the launch's cudaError_t.
int launchCopy(void* dst, const void* src, size_t bytes, cudaStream_t stream);

}  // namespace harness
}  // namespace arfuse
