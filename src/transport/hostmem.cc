// Host memory the GPUs map: the group area (GroupShared) and the host-staged exchange area, pinned
// and mapped in one process (cudaHostAlloc), POSIX shared memory registered with CUDA across
// processes (transport/shm.h). The two transports (local.cc, ipc.cc) call these.
#include "transport/hostmem.h"

#include <cuda_runtime.h>

#include <cstring>

#include "init/cuda_check.h"
#include "init/group_builder.h"

namespace arfuse {

// The group area (GroupShared) of an in-process group: pinned, mapped into every device (UVA: one
// address for host and kernels), zeroed.
Status allocatePinnedGroupArea(Group* g) {
  const cudaError_t ce = cudaHostAlloc(reinterpret_cast<void**>(&g->shared), sizeof(GroupShared),
                                       cudaHostAllocMapped | cudaHostAllocPortable);
  if (ce != cudaSuccess) {
    cudaGetLastError();
    g->shared = nullptr;
    return ARFUSE_FAIL(arfuseCudaError, "cudaHostAlloc(mapped, %zu B) failed: %s", sizeof(GroupShared),
                       cudaGetErrorString(ce));
  }
  std::memset(g->shared, 0, sizeof(GroupShared));
  g->sharedDev = g->shared;  // UVA: the mapped allocation has one address
  GroupShared* sh = g->shared;
  g->cleanups.push_back([sh] { cudaFreeHost(sh); });
  return Status();
}

// The host-staged exchange area: one pinned allocation mapped into every device of the group (a
// multi-process group will instead map POSIX shared memory registered with CUDA; the layout and the
// kernels are the same). Sized for messages up to hostSlotBytes per rank.
Status allocatePinnedHostArena(Group* g, const std::vector<int>& unique, long long messageBytes) {
  for (int d : unique) {
    int canMap = 0;
    ARFUSE_CUDA_CHECK(cudaDeviceGetAttribute(&canMap, cudaDevAttrCanMapHostMemory, d));
    if (!canMap) {
      g->fabric.hostStagedDetail = strprintf("device %d cannot map host memory (cudaDevAttrCanMapHostMemory = 0)", d);
      return Status();
    }
  }
  const size_t bytes = hostAreaBytesFor(*g, messageBytes);
  cudaError_t ce =
      cudaHostAlloc(reinterpret_cast<void**>(&g->hostArena), bytes, cudaHostAllocMapped | cudaHostAllocPortable);
  if (ce != cudaSuccess) {
    cudaGetLastError();
    g->hostArena = nullptr;
    g->fabric.hostStagedDetail = strprintf("cudaHostAlloc(mapped, %zu B) failed: %s", bytes, cudaGetErrorString(ce));
    return Status();  // not fatal: the plan says why the path is missing
  }
  // Zero the flags (counter 0 never matches a call); the slots need no init.
  std::memset(g->hostArena, 0, hostArenaBytes(g->nranks, 0));
  char* arena = g->hostArena;
  g->cleanups.push_back([arena] { cudaFreeHost(arena); });
  layoutHostArena(g, g->hostArena, messageBytes);
  return Status();
}

// The group area (GroupShared) of a multi-process group: the group segment, registered with CUDA.
Status mapSharedGroupArea(Group* g, ShmSegment* seg) {
  ARFUSE_CHECK(shmRegister(seg));
  g->shared = static_cast<GroupShared*>(seg->host);
  g->sharedDev = static_cast<GroupShared*>(seg->device);
  return Status();
}

// The host-staged area: rank 0 sizes the segment it reserved, the others open it; everyone
// registers it with CUDA.
Status mapSharedHostArea(Group* g, int rank, const std::vector<mp::Hello>& h, ShmSegment* reservedHost,
                         const std::string& hostName, int timeoutMs) {
  bool canMap = true;
  for (size_t s = 0; s < h.size(); ++s) canMap = canMap && h[s].canMapHost;
  if (!canMap) {
    g->fabric.hostStagedDetail = "a GPU of the group cannot map host memory";
  } else {
    const long long messageBytes = hostMessageBytesFor(*g);
    const size_t bytes = hostAreaBytesFor(*g, messageBytes);
    auto* hseg = new ShmSegment();
    g->cleanups.push_back([hseg] {
      shmRelease(hseg);
      delete hseg;
    });
    // Rank 0 sizes the segment it reserved before phase A; posix_fallocate makes a full /dev/shm
    // an error here, with the size and the fix, instead of a SIGBUS at the first touch.
    if (rank == 0) {
      *hseg = *reservedHost;
      reservedHost->fd = -1;
    }
    ARFUSE_CHECK_PREFIXED("host-staged area: ",
                          rank == 0 ? shmAllocate(hseg, bytes) : shmOpen(hostName, bytes, timeoutMs, hseg));
    ARFUSE_CHECK_PREFIXED("host-staged area: ", shmRegister(hseg));
    layoutHostArena(g, static_cast<char*>(hseg->device), messageBytes);  // fresh shared memory is zero-filled
    g->hostArenaBytes = bytes;
  }
  return Status();
}

}  // namespace arfuse
