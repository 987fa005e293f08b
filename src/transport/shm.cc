#include "transport/shm.h"

#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "transport/shm_name.h"

namespace arfuse {
namespace {

Status mapFd(int fd, size_t bytes, ShmSegment* seg) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  close(fd);
  if (seg->fd == fd) seg->fd = -1;
  if (p == MAP_FAILED)
    return ARFUSE_FAIL(arfuseSystemError, "mmap(%s, %zu B): %s", seg->name.c_str(), bytes, std::strerror(e));
  seg->host = p;
  seg->bytes = bytes;
  return Status();
}

std::string mib(unsigned long long bytes) { return strprintf("%.1f MiB", bytes / 1048576.0); }

}  // namespace

std::string shmRandomName(const char* suffix) {
  unsigned long long r = 0;
  if (getrandom(&r, sizeof r, 0) != static_cast<ssize_t>(sizeof r)) {
    // No entropy syscall (very old kernel): the clock and the pid still make a collision unlikely, and
    // O_EXCL turns one into an error, never into sharing.
    r = static_cast<unsigned long long>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
        (static_cast<unsigned long long>(getpid()) << 40);
  }
  return strprintf("/arfuse-%016llx-%s-%s", r, shmCreatorTag().c_str(), suffix);  // transport/shm_name.h
}

Status shmAllocateFd(int fd, size_t bytes, const std::string& what) {
  if (bytes == 0) return Status();
  int e;
  do {
    e = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  } while (e == EINTR);
  if (e == 0) return Status();
  if (e == ENOSPC || e == EFBIG) {
    struct statvfs vs;
    const std::string free = fstatvfs(fd, &vs) == 0
                                 ? mib(static_cast<unsigned long long>(vs.f_bavail) * vs.f_frsize) + " free of " +
                                       mib(static_cast<unsigned long long>(vs.f_blocks) * vs.f_frsize)
                                 : std::string("unknown free space");
    return ARFUSE_FAIL(arfuseSystemError,
                       "%s needs %zu B (%s) of shared memory but /dev/shm has %s: raise it (docker run --shm-size=1g) "
                       "or lower maxTokens/maxHidden",
                       what.c_str(), bytes, mib(bytes).c_str(), free.c_str());
  }
  return ARFUSE_FAIL(arfuseSystemError, "posix_fallocate(%s, %zu B): %s", what.c_str(), bytes, std::strerror(e));
}

Status shmReserve(const std::string& name, ShmSegment* seg) {
  seg->name = name;
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return ARFUSE_FAIL(arfuseSystemError, "shm_open(%s, create): %s", name.c_str(), std::strerror(errno));
  seg->fd = fd;
  return Status();
}

Status shmAllocate(ShmSegment* seg, size_t bytes) {
  if (seg->fd < 0) return ARFUSE_FAIL(arfuseInternalError, "%s: not a reserved segment", seg->name.c_str());
  ARFUSE_CHECK(shmAllocateFd(seg->fd, bytes, seg->name));
  return mapFd(seg->fd, bytes, seg);
}

Status shmCreate(const std::string& name, size_t bytes, ShmSegment* seg) {
  ARFUSE_CHECK(shmReserve(name, seg));
  if (Status st = shmAllocate(seg, bytes); !st.ok()) {
    if (seg->fd >= 0) close(seg->fd);
    seg->fd = -1;
    shm_unlink(name.c_str());
    return st.through(__FILE__, __LINE__);
  }
  return Status();
}

Status shmOpen(const std::string& name, size_t bytes, int timeoutMs, ShmSegment* seg) {
  seg->name = name;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  for (;;) {
    const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
      struct stat st;
      if (fstat(fd, &st) == 0 && st.st_uid != geteuid()) {
        close(fd);
        return ARFUSE_FAIL(arfuseSystemError,
                           "shared memory %s belongs to uid %u, not to this user (uid %u): refusing it", name.c_str(),
                           static_cast<unsigned>(st.st_uid), static_cast<unsigned>(geteuid()));
      }
      if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= bytes) return mapFd(fd, bytes, seg);
      close(fd);
    } else if (errno != ENOENT) {
      return ARFUSE_FAIL(arfuseSystemError, "shm_open(%s): %s", name.c_str(), std::strerror(errno));
    }
    if (std::chrono::steady_clock::now() > deadline)
      return ARFUSE_FAIL(arfuseSystemError,
                         "shared memory %s (%zu B) did not appear within %d ms (did rank 0 fail or die?)", name.c_str(),
                         bytes, timeoutMs);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Status shmRegister(ShmSegment* seg) {
  cudaError_t e = cudaHostRegister(seg->host, seg->bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return ARFUSE_FAIL(arfuseCudaError, "cudaHostRegister(%s, %zu B): %s", seg->name.c_str(), seg->bytes,
                       cudaGetErrorString(e));
  }
  seg->registered = true;
  e = cudaHostGetDevicePointer(&seg->device, seg->host, 0);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return ARFUSE_FAIL(arfuseCudaError, "cudaHostGetDevicePointer(%s): %s", seg->name.c_str(), cudaGetErrorString(e));
  }
  return Status();
}

void shmRelease(ShmSegment* seg) {
  if (seg->registered) cudaHostUnregister(seg->host);
  seg->registered = false;
  if (seg->host) munmap(seg->host, seg->bytes);
  seg->host = seg->device = nullptr;
  if (seg->fd >= 0) close(seg->fd);
  seg->fd = -1;
}

void shmUnlink(const std::string& name) {
  if (!name.empty()) shm_unlink(name.c_str());
}

}  // namespace arfuse
