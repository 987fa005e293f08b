// The registry of live communicator handles, and why a destroyed handle never comes back to life.
//
// arfuseComm_t is a pointer. If a destroyed communicator's memory were freed, the allocator would hand
// the same address to the next communicator created, and a caller still holding the stale handle
// would silently drive the new group (glibc reuses a freed block of that size at once). So a destroyed
// handle is retired, not freed: the group behind it is freed, but the handle's few dozen bytes stay
// allocated, and listed here, for the life of the process, and a retired address is never live again.
// Host-only (no CUDA): CPU-tested.
#pragma once

#include <cstddef>

namespace arfuse {

void handleRegister(const void* h);
bool handleIsLive(const void* h);
// Removes h from the live set and keeps it on the retired list. The caller must not free h.
void handleRetire(const void* h);
size_t handleRetiredCount();

}  // namespace arfuse
