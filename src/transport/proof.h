// Peer-access proof at init (transport/p2p.cc; current device, default stream): stores a seeded
// pattern of `words` 32-bit words at dst / counts the words of src that differ from it into *wrong
// (device memory). Each returns a cudaError_t value (as int).
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace arfuse {

int launchProofStore(void* dst, size_t words, uint32_t seed);
int launchProofCheck(const void* src, size_t words, uint32_t seed, unsigned* wrong);

}  // namespace arfuse
