// POSIX shared memory mapped into this process and registered with CUDA (mapped, portable), so that
// kernels of several processes can address the same host memory: the group area (abort flag, error
// records, flight recorder, init exchange) and the host-staged exchange area of multi-process groups.
#pragma once

#include <cstddef>
#include <string>

namespace arfuse {

struct ShmSegment {
  std::string name;        // "/arfuse-..." (shm_open name)
  void* host = nullptr;    // mapping in this process
  void* device = nullptr;  // the same memory as the current device's kernels address it
  size_t bytes = 0;
  bool registered = false;
};

// Creates (exclusively) and maps a zero-filled segment. Fails if the name exists.
bool shmCreate(const std::string& name, size_t bytes, ShmSegment* seg, std::string* error);
// Opens and maps an existing segment once its creator has sized it, waiting up to timeoutMs.
bool shmOpen(const std::string& name, size_t bytes, int timeoutMs, ShmSegment* seg, std::string* error);
// Registers the mapping with CUDA for the current device (cudaHostRegisterMapped | Portable).
bool shmRegister(ShmSegment* seg, std::string* error);
// Unregisters and unmaps (the name is not touched).
void shmRelease(ShmSegment* seg);
// Removes the name (the memory lives on while mapped). Ignores a name already gone.
void shmUnlink(const std::string& name);

}  // namespace arfuse
