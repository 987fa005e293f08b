// Peer-to-peer memory: peer access enabled between devices, proven with seeded stores and loads
// before any path relies on it, and (multi-process) CUDA IPC handles exported and opened into the
// group's peer views (g->peers). The two transports (local.cc, ipc.cc) call these.
#include "transport/p2p.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "init/cuda_check.h"
#include "transport/process_cookie.h"
#include "transport/proof.h"

namespace arfuse {

using namespace mp;  // NOLINT: the multi-process half speaks the segment protocol

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
      cudaError_t e = launchProofStore(g->ranks[rb].staging, words, seed);
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
        return proofVerdict(kProofCudaError,
                            strprintf("peer access from device %d to device %d is advertised but failed when used: %s",
                                      a, b, cudaGetErrorString(e)),
                            &f);
      }
      if (wrongStore || wrongLoad)
        return proofVerdict(
            kProofWrongData,
            strprintf("peer access from device %d to device %d is advertised but %s (%u and %u of %zu "
                      "words wrong): ACS or an IOMMU likely",
                      a, b, wrongStore ? "a peer store did not land" : "a peer load returned wrong data", wrongStore,
                      wrongLoad, words),
            &f);
    }
  }
  return Status();
}

// This rank's buffers as CUDA IPC handles (and raw pointers, for peers in this process) in its
// phase B post; the driver's refusal if it refuses.
Status exportIpcHandles(const RankResources& rr, mp::Wire* w) {
  w->stagingPtr = reinterpret_cast<uint64_t>(rr.staging);
  w->controlPtr = reinterpret_cast<uint64_t>(rr.control);
  w->llPtr = reinterpret_cast<uint64_t>(rr.ll);
  cudaError_t e = cudaIpcGetMemHandle(&w->staging, rr.staging);
  if (e == cudaSuccess) e = cudaIpcGetMemHandle(&w->control, rr.control);
  if (e == cudaSuccess && rr.ll) e = cudaIpcGetMemHandle(&w->ll, rr.ll);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return ARFUSE_FAIL(arfuseCudaError, "cudaIpcGetMemHandle: %s", cudaGetErrorString(e));
  }
  return Status();
}

// This rank's view of peer access to each rank's GPU (phase B's post), found by UUID among the GPUs
// this process sees (CUDA_VISIBLE_DEVICES may hide some); peer access is enabled where it exists.
void localReach(int nranks, int rank, int device, int count, const std::vector<Hello>& h, Wire* w) {
  std::vector<int> ordinalOf(nranks, -1);
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    for (int s = 0; s < nranks; ++s)
      if (std::memcmp(p.uuid.bytes, h[s].uuid, 16) == 0) ordinalOf[s] = d;
  }
  cudaGetLastError();
  for (int s = 0; s < nranks; ++s) {
    if (std::memcmp(h[s].uuid, h[rank].uuid, 16) == 0) {
      w->reach[s] = 1;
      continue;
    }
    int can = 0;
    if (ordinalOf[s] < 0) {
      if (!w->reachWhy[0])
        std::snprintf(w->reachWhy, sizeof w->reachWhy,
                      "rank %d's GPU is not visible to rank %d (CUDA_VISIBLE_DEVICES?)", s, rank);
    } else if (cudaDeviceCanAccessPeer(&can, device, ordinalOf[s]) != cudaSuccess || !can) {
      if (!w->reachWhy[0])
        std::snprintf(w->reachWhy, sizeof w->reachWhy, "cudaDeviceCanAccessPeer(%d, %d) = 0 (ranks %d, %d)", device,
                      ordinalOf[s], rank, s);
    } else {
      const cudaError_t e = cudaDeviceEnablePeerAccess(ordinalOf[s], 0);
      if (e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled) {
        w->reach[s] = 1;
      } else if (!w->reachWhy[0]) {
        std::snprintf(w->reachWhy, sizeof w->reachWhy, "cudaDeviceEnablePeerAccess(%d -> %d): %s", device, ordinalOf[s],
                      cudaGetErrorString(e));
      }
      cudaGetLastError();
    }
  }
}

// Opens every peer's buffers (or takes its raw pointers when it is a rank of this process).
Status mapPeers(Group* g, int rank, const std::vector<Hello>& h, const std::vector<Wire>& ws) {
  for (int s = 0; s < g->nranks; ++s) {
    if (s == rank) continue;
    auto open = [&](const cudaIpcMemHandle_t& hnd, uint64_t raw, char** out) {
      if (sameProcess(h[s].hostHash, h[s].cookie, h[rank].hostHash, h[rank].cookie)) {  // its pointers are ours
        *out = reinterpret_cast<char*>(raw);
        return Status();
      }
      void* p = nullptr;
      const cudaError_t e = cudaIpcOpenMemHandle(&p, hnd, cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess) {
        cudaGetLastError();
        return ARFUSE_FAIL(arfuseCudaError,
                           "cudaIpcOpenMemHandle(rank %d's buffer): %s (a mapping that does not open fails the group: "
                           "processes in containers must share the IPC namespace, --ipc=host, and see the same GPUs)",
                           s, cudaGetErrorString(e));
      }
      g->cleanups.push_back([p] { cudaIpcCloseMemHandle(p); });
      *out = static_cast<char*>(p);
      return Status();
    };
    char *staging = nullptr, *control = nullptr, *ll = nullptr;
    ARFUSE_CHECK(open(ws[s].staging, ws[s].stagingPtr, &staging));
    ARFUSE_CHECK(open(ws[s].control, ws[s].controlPtr, &control));
    if (g->ws.llBytes) ARFUSE_CHECK(open(ws[s].ll, ws[s].llPtr, &ll));
    g->peers.staging[s] = staging;
    g->peers.control[s] = reinterpret_cast<ControlBlock*>(control);
    g->peers.ll[s] = ll;
  }
  return Status();
}

// Peer access reported is not peer access working (ACS, an IOMMU, a broken switch), and an IPC
// mapping that opened is not one that works. As proveP2p does for in-process groups, before any
// path relies on it: every rank stores a seeded pattern through its mapping into its own slice of
// every other GPU's staging buffer (phase D), then the owner checks each slice in its own memory
// and the writer loads it back through the mapping (phase E). Every rank posts its verdict and
// every rank takes the first failure from the same bytes: peer access is then off for the whole
// group (the plan uses host staging or NCCL) and the reason names the pair. Ranks sharing a GPU
// are not checked (their "peer" memory is local). Fails only when a rank did not arrive.
Status proveIpcPeers(Group* g, InitArea* ia, int rank, const std::vector<Hello>& h, int timeoutMs) {
  const int n = g->nranks;
  const size_t slice = g->ws.stagingBytes / static_cast<size_t>(n) / 16 * 16;
  const size_t words = std::min<size_t>(4096, slice / 4);
  auto other = [&](int s) { return s != rank && std::memcmp(h[s].uuid, h[rank].uuid, 16) != 0; };
  auto seedOf = [](int writer, int owner) { return static_cast<uint32_t>(writer * 131 + owner + 7) | 0x80000000u; };
  Report mine{};
  std::string why;
  cudaSetDevice(g->ranks[rank].device);
  for (int s = 0; s < n && why.empty() && words > 0; ++s) {
    if (!other(s)) continue;
    cudaError_t e = launchProofStore(g->peers.staging[s] + rank * slice, words, seedOf(rank, s));
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
      why = strprintf(
          "peer access from rank %d to rank %d's GPU (IPC mapping) is advertised but a store through it "
          "failed: %s",
          rank, s, cudaGetErrorString(e));
  }
  cudaGetLastError();
  mine.status = why.empty() ? arfuseSuccess : arfuseCudaError;  // a store that failed: proofVerdict fails the group
  setText(mine.text, why);
  std::vector<uint8_t> all;
  ARFUSE_CHECK(segmentExchange(ia, 3, rank, n, &mine, sizeof mine, timeoutMs, &all));
  bool wrongData = false;  // this rank's verdict of phase E: wrong words (a fallback), not a CUDA error
  const Status stored = postedFailure<Report>(all, n);
  if (stored.ok()) {
    // Every store has landed (each writer synchronised before posting): check them.
    unsigned* wrong = nullptr;
    cudaError_t e = cudaMalloc(&wrong, 2 * sizeof(unsigned));
    for (int s = 0; s < n && why.empty() && e == cudaSuccess && words > 0; ++s) {
      if (!other(s)) continue;
      unsigned count[2] = {0, 0};  // [0] rank s's store into my memory, [1] my store read back from s's
      e = cudaMemset(wrong, 0, 2 * sizeof(unsigned));
      if (e == cudaSuccess) e = launchProofCheck(g->ranks[rank].staging + s * slice, words, seedOf(s, rank), wrong);
      if (e == cudaSuccess) e = launchProofCheck(g->peers.staging[s] + rank * slice, words, seedOf(rank, s), wrong + 1);
      if (e == cudaSuccess) e = cudaMemcpy(count, wrong, sizeof count, cudaMemcpyDeviceToHost);
      if (e != cudaSuccess) {
        why = strprintf("peer access between ranks %d and %d (IPC mapping) is advertised but checking it failed: %s",
                        rank, s, cudaGetErrorString(e));
      } else if (count[0] || count[1]) {
        wrongData = true;
        why = strprintf(
            "peer access between ranks %d and %d (IPC mapping) is advertised but %s (%u and %u of %zu "
            "words wrong): ACS or an IOMMU likely",
            count[0] ? s : rank, count[0] ? rank : s,
            count[0] ? "a peer store did not land" : "a peer load returned wrong data", count[0], count[1], words);
      }
    }
    if (e != cudaSuccess && why.empty())
      why = strprintf("rank %d could not check peer access: %s", rank, cudaGetErrorString(e));
    if (wrong) cudaFree(wrong);
    cudaGetLastError();
  } else {
    why = stored.message();  // a rank's store failed (arfuseCudaError): every rank posts it on
  }
  // Phase E's verdict: arfuseUnsupported for data that did not land (the peer paths are off),
  // arfuseCudaError for a CUDA error (the group fails); every rank decides from the same bytes.
  mine.status = why.empty() ? arfuseSuccess : wrongData ? arfuseUnsupported : arfuseCudaError;
  setText(mine.text, why);
  ARFUSE_CHECK(segmentExchange(ia, 4, rank, n, &mine, sizeof mine, timeoutMs, &all));
  const Status checked = postedFailure<Report>(all, n);
  if (checked.ok()) return Status();
  // The first CUDA error among the ranks decides; else the first wrong-data verdict.
  for (int s = 0; s < n; ++s) {
    const Report* r = reinterpret_cast<const Report*>(all.data() + s * sizeof(Report));
    if (r->status == arfuseCudaError)
      return proofVerdict(kProofCudaError, strprintf("rank %d: %.*s", s, kTextBytes, r->text), &g->fabric);
  }
  return proofVerdict(kProofWrongData, checked.message(), &g->fabric);  // init/group_builder.cc buildGroup says so
}

}  // namespace arfuse
