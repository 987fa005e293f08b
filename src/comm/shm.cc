#include "comm/shm.h"

#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "diag/log.h"

namespace arfuse {
namespace {

bool mapFd(int fd, size_t bytes, ShmSegment* seg, std::string* error) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    *error = strprintf("mmap(%s, %zu B): %s", seg->name.c_str(), bytes, std::strerror(errno));
    return false;
  }
  seg->host = p;
  seg->bytes = bytes;
  return true;
}

}  // namespace

bool shmCreate(const std::string& name, size_t bytes, ShmSegment* seg, std::string* error) {
  seg->name = name;
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    *error = strprintf("shm_open(%s, create): %s", name.c_str(), std::strerror(errno));
    return false;
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    *error = strprintf("ftruncate(%s, %zu B): %s (is /dev/shm large enough? `df -h /dev/shm`)", name.c_str(), bytes,
                       std::strerror(errno));
    close(fd);
    shm_unlink(name.c_str());
    return false;
  }
  if (!mapFd(fd, bytes, seg, error)) {
    shm_unlink(name.c_str());
    return false;
  }
  return true;
}

bool shmOpen(const std::string& name, size_t bytes, int timeoutMs, ShmSegment* seg, std::string* error) {
  seg->name = name;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  for (;;) {
    const int fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd >= 0) {
      struct stat st;
      if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= bytes) return mapFd(fd, bytes, seg, error);
      close(fd);
    } else if (errno != ENOENT) {
      *error = strprintf("shm_open(%s): %s", name.c_str(), std::strerror(errno));
      return false;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      *error = strprintf("shared memory %s (%zu B) did not appear within %d ms (did rank 0 fail or die?)",
                         name.c_str(), bytes, timeoutMs);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool shmRegister(ShmSegment* seg, std::string* error) {
  cudaError_t e = cudaHostRegister(seg->host, seg->bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *error = strprintf("cudaHostRegister(%s, %zu B): %s", seg->name.c_str(), seg->bytes, cudaGetErrorString(e));
    return false;
  }
  seg->registered = true;
  e = cudaHostGetDevicePointer(&seg->device, seg->host, 0);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *error = strprintf("cudaHostGetDevicePointer(%s): %s", seg->name.c_str(), cudaGetErrorString(e));
    return false;
  }
  return true;
}

void shmRelease(ShmSegment* seg) {
  if (seg->registered) cudaHostUnregister(seg->host);
  seg->registered = false;
  if (seg->host) munmap(seg->host, seg->bytes);
  seg->host = seg->device = nullptr;
}

void shmUnlink(const std::string& name) {
  if (!name.empty()) shm_unlink(name.c_str());
}

}  // namespace arfuse
