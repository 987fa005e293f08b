// POSIX shared memory mapped into this process and registered with CUDA (mapped, portable), so that
// kernels of several processes can address the same host memory: the group area (abort flag, error
// records, flight recorder, init exchange) and the host-staged exchange area of multi-process groups.
//
// Names are random ("/arfuse-<16 hex>-g" and "-h", each drawn independently) and created exclusively
// with mode 0600 by rank 0 before any other process learns them, so another local user can neither
// open them nor take a name first. Memory is allocated for real (posix_fallocate): on a nearly full
// /dev/shm (Docker's default is 64 MB) creation fails with the size and the fix, instead of the first
// touch killing the process with SIGBUS.
#pragma once

#include <cstddef>
#include <string>

#include "base/status.h"

namespace arfuse {

struct ShmSegment {
  std::string name;        // "/arfuse-..." (shm_open name)
  int fd = -1;             // a reserved, not yet sized segment keeps its descriptor (shmReserve)
  void* host = nullptr;    // mapping in this process
  void* device = nullptr;  // the same memory as the current device's kernels address it
  size_t bytes = 0;
  bool registered = false;
};

// A fresh random name with the given suffix ("g", "h"): "/arfuse-<16 hex digits>-<creator>-<suffix>",
// the creator being this process (transport/shm_name.h: what `arfuse doctor --clean` checks).
std::string shmRandomName(const char* suffix);
// Creates (exclusively, 0600), allocates and maps a zero-filled segment. Fails if the name exists,
// or when /dev/shm cannot hold `bytes` (the message says how much is free and what to do).
Status shmCreate(const std::string& name, size_t bytes, ShmSegment* seg);
// Creates the name (exclusively, 0600, size 0) and keeps its descriptor, so that the name is ours
// before it is published; shmAllocate sizes and maps it later.
Status shmReserve(const std::string& name, ShmSegment* seg);
Status shmAllocate(ShmSegment* seg, size_t bytes);
// Opens and maps an existing segment once its creator has sized it, waiting up to timeoutMs. The
// segment must belong to this user (a segment of another owner under our name is refused).
Status shmOpen(const std::string& name, size_t bytes, int timeoutMs, ShmSegment* seg);
// Registers the mapping with CUDA for the current device (cudaHostRegisterMapped | Portable).
Status shmRegister(ShmSegment* seg);
// Unregisters and unmaps, closes a kept descriptor (the name is not touched).
void shmRelease(ShmSegment* seg);
// Removes the name (the memory lives on while mapped). Ignores a name already gone.
void shmUnlink(const std::string& name);

// Makes `bytes` bytes of fd real memory (posix_fallocate), or says why not: ENOSPC names the free
// space of the file system holding `what` and the fixes. Exposed for the CPU tests.
Status shmAllocateFd(int fd, size_t bytes, const std::string& what);

}  // namespace arfuse
