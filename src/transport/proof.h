// Peer-access proof at init (transport/p2p.cc; current device, default stream): stores a seeded
// pattern of `words` 32-bit words at dst / counts the words of src that differ from it into *wrong
// (device memory). Each returns CUDA's answer to the launch: one step of p2p.cc's chain of runtime
// calls, whose Status says which peer access failed.
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

namespace arfuse {

cudaError_t launchProofStore(void* dst, size_t words, uint32_t seed);
cudaError_t launchProofCheck(const void* src, size_t words, uint32_t seed, unsigned* wrong);

}  // namespace arfuse
