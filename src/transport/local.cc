#include "transport/local.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>

#include "algos/launch.h"
#include "init/cuda_check.h"

namespace arfuse {
namespace {

Status allocateRanks(Group* g, const int* devices) {
  for (int r = 0; r < g->nranks; ++r) ARFUSE_CHECK(allocateRank(g, r, devices[r]));
  return Status();
}

// Enables peer access between every pair of distinct devices; fills fabric.p2p / p2pDetail.
Status connectPeers(Group* g, const std::vector<int>& unique) {
  g->fabric.p2p = true;
  for (int a : unique) {
    for (int b : unique) {
      if (a == b) continue;
      int can = 0;
      ARFUSE_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
      if (!can) {
        g->fabric.p2p = false;
        g->fabric.p2pDetail = strprintf("cudaDeviceCanAccessPeer(%d, %d) = 0", a, b);
        return Status();
      }
    }
  }
  for (int a : unique) {
    ARFUSE_CUDA_CHECK(cudaSetDevice(a));
    for (int b : unique) {
      if (a == b) continue;
      cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();
      } else if (e != cudaSuccess) {
        cudaGetLastError();
        g->fabric.p2p = false;
        g->fabric.p2pDetail = strprintf("cudaDeviceEnablePeerAccess(%d -> %d): %s", a, b, cudaGetErrorString(e));
        return Status();
      }
    }
  }
  return Status();
}

// The host-staged exchange area: one pinned allocation mapped into every device of the group (a
// multi-process group will instead map POSIX shared memory registered with CUDA; the layout and the
// kernels are the same). Sized for messages up to hostSlotBytes per rank.
Status allocateHostArena(Group* g, const std::vector<int>& unique, long long messageBytes) {
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

// Peer access reported is not peer access working (ACS, IOMMU, broken switches): before any path
// relies on it, every ordered pair of distinct devices proves it with a real peer store and a real
// peer load of a seeded pattern, checked word by word. A failure turns the group's P2P off (the
// plan then uses the host-staged path or NCCL) and the reason names the pair.
Status proveP2p(Group* g) {
  Fabric& f = g->fabric;
  std::vector<int> first;  // one rank per distinct device
  for (int r = 0; r < g->nranks; ++r) {
    bool seen = false;
    for (int q : first) seen = seen || g->ranks[q].device == g->ranks[r].device;
    if (!seen) first.push_back(r);
  }
  if (first.size() < 2) return Status();
  const size_t words = std::min<size_t>(4096, g->ws.stagingBytes / 4);
  for (int ra : first) {
    for (int rb : first) {
      if (ra == rb) continue;
      const int a = g->ranks[ra].device, b = g->ranks[rb].device;
      const uint32_t seed = static_cast<uint32_t>(a * 131 + b + 7);
      unsigned* wrong = nullptr;
      unsigned wrongStore = 0, wrongLoad = 0;
      // a stores into b's memory; b checks locally; a loads it back through the peer mapping.
      ARFUSE_CUDA_CHECK(cudaSetDevice(a));
      ARFUSE_CUDA_CHECK(cudaMalloc(&wrong, 2 * sizeof(unsigned)));
      ARFUSE_CUDA_CHECK(cudaMemset(wrong, 0, 2 * sizeof(unsigned)));
      int e = launchProofStore(g->ranks[rb].staging, words, seed);
      if (e == cudaSuccess) e = cudaDeviceSynchronize();
      if (e == cudaSuccess) {
        ARFUSE_CUDA_CHECK(cudaSetDevice(b));
        unsigned* wrongB = nullptr;
        ARFUSE_CUDA_CHECK(cudaMalloc(&wrongB, sizeof(unsigned)));
        ARFUSE_CUDA_CHECK(cudaMemset(wrongB, 0, sizeof(unsigned)));
        e = launchProofCheck(g->ranks[rb].staging, words, seed, wrongB);
        if (e == cudaSuccess) e = cudaMemcpy(&wrongStore, wrongB, sizeof(unsigned), cudaMemcpyDeviceToHost);
        cudaFree(wrongB);
        ARFUSE_CUDA_CHECK(cudaSetDevice(a));
        if (e == cudaSuccess) e = launchProofCheck(g->ranks[rb].staging, words, seed, wrong + 1);
        if (e == cudaSuccess) e = cudaMemcpy(&wrongLoad, wrong + 1, sizeof(unsigned), cudaMemcpyDeviceToHost);
      }
      cudaFree(wrong);
      if (e != cudaSuccess) {
        cudaGetLastError();
        f.p2p = false;
        f.p2pDetail = strprintf("peer access from device %d to device %d is advertised but failed when used: %s", a, b,
                                cudaGetErrorString(cudaError_t(e)));
        return Status();
      }
      if (wrongStore || wrongLoad) {
        f.p2p = false;
        f.p2pDetail = strprintf(
            "peer access from device %d to device %d is advertised but %s (%u and %u of %zu words "
            "wrong): ACS or an IOMMU likely",
            a, b, wrongStore ? "a peer store did not land" : "a peer load returned wrong data", wrongStore, wrongLoad,
            words);
        return Status();
      }
    }
  }
  return Status();
}

// In-process groups: one process drives every rank, so every buffer is a plain device pointer
// (the same device for virtual ranks, a peer device with peer access enabled otherwise: UVA).
class InProcessTransport : public Transport {
 public:
  InProcessTransport(const int* devices, std::vector<int> unique) : devices_(devices), unique_(std::move(unique)) {}

  Status allocate(Group* g) override {
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
    return allocateRanks(g, devices_);
  }
  Status connect(Group* g) override { return connectPeers(g, unique_); }
  Status prove(Group* g) override { return proveP2p(g); }
  Status nccl(Group* g) override {
    Fabric& f = g->fabric;
    std::vector<ncclComm_t> nc(g->nranks);
    const ncclResult_t nr = ncclCommInitAll(nc.data(), g->nranks, devices_);
    if (nr == ncclSuccess) {
      f.nccl = true;
      for (int r = 0; r < g->nranks; ++r) g->ranks[r].nccl = nc[r];
    } else {
      f.ncclDetail = strprintf("ncclCommInitAll: %s", ncclGetErrorString(nr));
      ARFUSE_LOG(kLogWarn, LogContext{}, "path=nccl", "disabled: %s", f.ncclDetail.c_str());
    }
    return Status();
  }
  Status hostArea(Group* g, bool needed) override {
    return needed ? allocateHostArena(g, unique_, hostMessageBytesFor(*g)) : Status();
  }

 private:
  const int* devices_;
  std::vector<int> unique_;
};

}  // namespace

std::unique_ptr<Transport> makeInProcessTransport(const int* devices, std::vector<int> unique) {
  return std::unique_ptr<Transport>(new InProcessTransport(devices, std::move(unique)));
}

}  // namespace arfuse
