// The guard kernel after an NCCL operation across hosts (comm/nccl_guard.h).
#include <stdint.h>

#include "comm/nccl_guard.h"

namespace arfuse {
namespace {

// One block (the common case is a healthy group: one load of host memory, then exit); an aborted
// group fills the buffer with a grid-stride loop, 16 bytes per store where aligned.
// `finished` (captured operations, diag/nccl_watch.h CapturedNcclWatch): counted once the
// operation is behind it, whatever the group's state.
__global__ void ncclGuardKernel(const int* abortWord, char* buf, size_t bytes, unsigned long long* finished) {
  __shared__ int aborted;
  if (threadIdx.x == 0) {
    aborted = *reinterpret_cast<const volatile int*>(abortWord);
    if (finished) atomicAdd(finished, 1ull);
  }
  __syncthreads();
  if (!aborted) return;
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(buf) & 15)) & 15;
  const size_t lead = head < bytes ? head : bytes;
  const size_t vecs = (bytes - lead) / 16;
  for (size_t i = threadIdx.x; i < lead; i += blockDim.x) buf[i] = static_cast<char>(0xFF);
  uint4* v = reinterpret_cast<uint4*>(buf + lead);  // [vecs] 16-byte words
  for (size_t i = threadIdx.x; i < vecs; i += blockDim.x) v[i] = make_uint4(~0u, ~0u, ~0u, ~0u);
  for (size_t i = lead + vecs * 16 + threadIdx.x; i < bytes; i += blockDim.x) buf[i] = static_cast<char>(0xFF);
}

// Before a captured operation: it started (counters[0] += 1), and which one (counters[2] = slot).
__global__ void ncclStampKernel(unsigned long long* counters, unsigned long long slot) {
  atomicAdd(&counters[0], 1ull);
  *reinterpret_cast<volatile unsigned long long*>(&counters[2]) = slot;
}

}  // namespace

cudaError_t launchNcclGuard(const int* abortWord, void* buf, size_t bytes, cudaStream_t stream,
                            unsigned long long* finished) {
  if (!buf) bytes = 0;
  if (!abortWord || (bytes == 0 && !finished)) return cudaSuccess;  // a counted operation is always counted
  ncclGuardKernel<<<1, 256, 0, stream>>>(abortWord, static_cast<char*>(buf), bytes, finished);
  return cudaGetLastError();
}

cudaError_t launchNcclStamp(unsigned long long* counters, unsigned long long slot, cudaStream_t stream) {
  ncclStampKernel<<<1, 1, 0, stream>>>(counters, slot);
  return cudaGetLastError();
}

}  // namespace arfuse
