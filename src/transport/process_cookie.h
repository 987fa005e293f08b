// Which ranks of a multi-process group live in this very process. A PID cannot say it: containers
// with private PID namespaces that share the host's IPC and network namespaces give two processes
// the same PID, and a rank that took a peer's raw device pointers for its own would then read its
// own buffers as the peer's. A random cookie per process can say it. Host-only; CPU-tested.
#pragma once

#include <stdint.h>

namespace arfuse {

// A random, non-zero 64-bit value fixed for the life of this process and renewed in a child made
// by fork() (a child inherits the parent's memory, so a cached value would otherwise be shared).
uint64_t processCookie();

// Two ranks share an address space only when they are on one host and carry one cookie.
inline bool sameProcess(uint64_t hostA, uint64_t cookieA, uint64_t hostB, uint64_t cookieB) {
  return hostA == hostB && cookieA == cookieB && cookieA != 0;
}

}  // namespace arfuse
