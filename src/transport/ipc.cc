#include "transport/ipc.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "algos/launch.h"
#include "comm/process_cookie.h"
#include "core/status.h"
#include "policy/resolve.h"

namespace arfuse {

namespace mp {

// Posts this rank's blob for `phase` and waits (bounded) for every rank's.
Status segmentExchange(InitArea* ia, int phase, int rank, int nranks, const void* mine, size_t bytes, int timeoutMs,
                       std::vector<uint8_t>* all) {
  std::memcpy(ia->slots[phase][rank], mine, bytes);
  ia->phase[rank].store(static_cast<uint32_t>(phase), std::memory_order_release);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  for (int spins = 0;; ++spins) {
    std::string missing;
    for (int s = 0; s < nranks; ++s)
      if (ia->phase[s].load(std::memory_order_acquire) < static_cast<uint32_t>(phase))
        missing += (missing.empty() ? "" : ",") + std::to_string(s);
    if (missing.empty()) break;
    if (std::chrono::steady_clock::now() > deadline)
      return ARFUSE_FAIL(arfusePeerTimeout,
                         "init phase %c: rank(s) %s did not arrive within %d ms (did they fail or die? see their logs)",
                         'A' + phase, missing.c_str(), timeoutMs);
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  all->resize(static_cast<size_t>(nranks) * bytes);
  for (int s = 0; s < nranks; ++s) std::memcpy(all->data() + s * bytes, ia->slots[phase][s], bytes);
  return Status();
}

}  // namespace mp

namespace {

using namespace mp;  // NOLINT: this file is the protocol's other half

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
  auto cudaText = [](int e) { return cudaGetErrorString(cudaError_t(e)); };
  Report mine{};
  std::string why;
  cudaSetDevice(g->ranks[rank].device);
  for (int s = 0; s < n && why.empty() && words > 0; ++s) {
    if (!other(s)) continue;
    int e = launchProofStore(g->peers.staging[s] + rank * slice, words, seedOf(rank, s));
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
      why = strprintf(
          "peer access from rank %d to rank %d's GPU (IPC mapping) is advertised but a store through it "
          "failed: %s",
          rank, s, cudaText(e));
  }
  cudaGetLastError();
  mine.status = why.empty() ? arfuseSuccess : arfuseCudaError;  // a verdict here, not an init failure
  setText(mine.text, why);
  std::vector<uint8_t> all;
  ARFUSE_CHECK(segmentExchange(ia, 3, rank, n, &mine, sizeof mine, timeoutMs, &all));
  arfuseResult_t code;
  std::string first;
  if (!firstFailure<Report>(all, n, &code, &first)) {
    // Every store has landed (each writer synchronised before posting): check them.
    unsigned* wrong = nullptr;
    int e = cudaMalloc(&wrong, 2 * sizeof(unsigned));
    for (int s = 0; s < n && why.empty() && e == cudaSuccess && words > 0; ++s) {
      if (!other(s)) continue;
      unsigned count[2] = {0, 0};  // [0] rank s's store into my memory, [1] my store read back from s's
      e = cudaMemset(wrong, 0, 2 * sizeof(unsigned));
      if (e == cudaSuccess) e = launchProofCheck(g->ranks[rank].staging + s * slice, words, seedOf(s, rank), wrong);
      if (e == cudaSuccess) e = launchProofCheck(g->peers.staging[s] + rank * slice, words, seedOf(rank, s), wrong + 1);
      if (e == cudaSuccess) e = cudaMemcpy(count, wrong, sizeof count, cudaMemcpyDeviceToHost);
      if (e != cudaSuccess) {
        why = strprintf("peer access between ranks %d and %d (IPC mapping) is advertised but checking it failed: %s",
                        rank, s, cudaText(e));
      } else if (count[0] || count[1]) {
        why = strprintf(
            "peer access between ranks %d and %d (IPC mapping) is advertised but %s (%u and %u of %zu "
            "words wrong): ACS or an IOMMU likely",
            count[0] ? s : rank, count[0] ? rank : s,
            count[0] ? "a peer store did not land" : "a peer load returned wrong data", count[0], count[1], words);
      }
    }
    if (e != cudaSuccess && why.empty()) why = strprintf("rank %d could not check peer access: %s", rank, cudaText(e));
    if (wrong) cudaFree(wrong);
    cudaGetLastError();
  } else {
    why = first;
  }
  mine.status = why.empty() ? arfuseSuccess : arfuseCudaError;
  setText(mine.text, why);
  ARFUSE_CHECK(segmentExchange(ia, 4, rank, n, &mine, sizeof mine, timeoutMs, &all));
  if (firstFailure<Report>(all, n, &code, &first)) {  // init/group_builder.cc buildGroup says so
    g->fabric.p2p = false;
    g->fabric.p2pDetail = first;
  }
  return Status();
}

// Every rank resolved the plan limits itself (its ARFUSE_CALIBRATION_FILE, the GPUs it sees): they
// must be equal on every rank, since each rank plans its calls alone. If any rank differs, every
// rank falls back to the configured limits (config > environment > built-in, already checked equal
// at phase A) and says why; the decision is taken from the same bytes everywhere.
void agreeOnPolicy(const std::vector<Wire>& ws, const PlanPolicy& configured, const LogContext& ctx,
                   PlanPolicy* policy) {
  auto limitsOf = [&](const Wire& w) {
    PlanPolicy p = configured;
    p.oneShotMaxBytes = w.oneShotMax;
    p.hostOneShotMaxBytes = w.hostOneShotMax;
    p.hostStagedMaxBytes = w.hostStagedMax;
    p.lowLatencyMaxBytes = w.lowLatencyMax;
    p.ncclAboveBytes = w.ncclAbove;
    return p;
  };
  const PlanPolicy first = limitsOf(ws[0]);
  for (size_t s = 1; s < ws.size(); ++s) {
    const PlanPolicy other = limitsOf(ws[s]);
    if (sameLimits(first, other)) continue;
    ARFUSE_LOG(kLogWarn, ctx, "",
               "ranks resolved different plan limits (rank 0: %s; rank %zu: %s): every rank uses the configured "
               "ones (%s); give every rank the same ARFUSE_CALIBRATION_FILE and the same visible GPUs",
               limitsText(first).c_str(), s, limitsText(other).c_str(), limitsText(configured).c_str());
    *policy = configured;
    return;
  }
}

// This rank's buffers and their IPC handles (phase B's post); the group area registered with CUDA.
arfuseResult_t localBuffers(Group* g, int rank, int device, ShmSegment* seg, Wire* w, std::string* why) {
  arfuseResult_t localB = arfuseSuccess;
  std::string& whyB = *why;
  std::string err;
  if (!shmRegister(seg, &err)) {
    localB = arfuseCudaError;
    whyB = err;
  } else {
    g->shared = static_cast<GroupShared*>(seg->host);
    g->sharedDev = static_cast<GroupShared*>(seg->device);
  }
  if (localB == arfuseSuccess) {
    const Status allocated = allocateRank(g, rank, device);
    localB = allocated.code();
    whyB = allocated.message();
    RankResources& rr = g->ranks[rank];
    if (localB == arfuseSuccess) {
      cudaError_t e = cudaIpcGetMemHandle(&w->staging, rr.staging);
      if (e == cudaSuccess) e = cudaIpcGetMemHandle(&w->control, rr.control);
      if (e == cudaSuccess && rr.ll) e = cudaIpcGetMemHandle(&w->ll, rr.ll);
      if (e != cudaSuccess) {
        cudaGetLastError();
        localB = arfuseCudaError;
        whyB = strprintf("cudaIpcGetMemHandle: %s", cudaGetErrorString(e));
      }
      w->stagingPtr = reinterpret_cast<uint64_t>(rr.staging);
      w->controlPtr = reinterpret_cast<uint64_t>(rr.control);
      w->llPtr = reinterpret_cast<uint64_t>(rr.ll);
    }
  }
  return localB;
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
bool mapPeers(Group* g, int rank, const std::vector<Hello>& h, const std::vector<Wire>& ws, std::string* why) {
  for (int s = 0; s < g->nranks; ++s) {
    if (s == rank) continue;
    auto open = [&](const cudaIpcMemHandle_t& hnd, uint64_t raw, char** out) {
      if (sameProcess(h[s].hostHash, h[s].cookie, h[rank].hostHash, h[rank].cookie)) {  // its pointers are ours
        *out = reinterpret_cast<char*>(raw);
        return true;
      }
      void* p = nullptr;
      const cudaError_t e = cudaIpcOpenMemHandle(&p, hnd, cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess) {
        cudaGetLastError();
        *why = strprintf("cudaIpcOpenMemHandle(rank %d's buffer): %s", s, cudaGetErrorString(e));
        return false;
      }
      g->cleanups.push_back([p] { cudaIpcCloseMemHandle(p); });
      *out = static_cast<char*>(p);
      return true;
    };
    char *staging = nullptr, *control = nullptr, *ll = nullptr;
    if (!open(ws[s].staging, ws[s].stagingPtr, &staging) || !open(ws[s].control, ws[s].controlPtr, &control) ||
        (g->ws.llBytes && !open(ws[s].ll, ws[s].llPtr, &ll)))
      return false;
    g->peers.staging[s] = staging;
    g->peers.control[s] = reinterpret_cast<ControlBlock*>(control);
    g->peers.ll[s] = ll;
  }
  return true;
}

// The host-staged area: rank 0 sizes the segment it reserved, the others open it; everyone
// registers it with CUDA.
Status mapHostArea(Group* g, int rank, const std::vector<Hello>& h, ShmSegment* reservedHost,
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
    std::string err;
    const bool ok = (rank == 0 ? shmAllocate(hseg, bytes, &err) : shmOpen(hostName, bytes, timeoutMs, hseg, &err)) &&
                    shmRegister(hseg, &err);
    if (!ok) return ARFUSE_FAIL(arfuseSystemError, "host-staged area: %s", err.c_str());
    layoutHostArena(g, static_cast<char*>(hseg->device), messageBytes);  // fresh shared memory is zero-filled
    g->hostArenaBytes = bytes;
  }
  return Status();
}

// Phase F: NCCL, when every rank has its own GPU; if any rank failed, every rank drops it.
Status initNccl(Group* g, InitArea* ia, int rank, const ncclUniqueId& id, int timeoutMs, const LogContext& ctx) {
  std::vector<uint8_t> all;
  Report sd{};
  ncclComm_t nc = nullptr;
  const ncclResult_t nr = ncclCommInitRank(&nc, g->nranks, id, rank);
  if (nr != ncclSuccess) {
    sd.status = arfuseNcclError;
    setText(sd.text, strprintf("ncclCommInitRank: %s", ncclGetErrorString(nr)));
  }
  Status st = segmentExchange(ia, 5, rank, g->nranks, &sd, sizeof sd, timeoutMs, &all);
  if (!st.ok()) {
    if (nc) ncclCommAbort(nc);
    return st.through(__FILE__, __LINE__);
  }
  arfuseResult_t ncclCode;
  std::string ncclWhy;
  if (firstFailure<Report>(all, g->nranks, &ncclCode, &ncclWhy)) {
    if (nc) ncclCommAbort(nc);
    g->fabric.nccl = false;
    g->fabric.ncclDetail = ncclWhy;
    ARFUSE_LOG(kLogWarn, ctx, "path=nccl", "disabled: %s", ncclWhy.c_str());
    if (g->policy.forcedAlgo == arfuseAlgoNccl)
      return ARFUSE_FAIL(arfuseNcclError, "config: algo=nccl is unavailable: %s", ncclWhy.c_str());
  } else {
    g->fabric.nccl = true;
    g->ranks[rank].nccl = nc;
  }
  return Status();
}

// Multi-process groups: this process holds one rank; its peers' buffers are CUDA IPC views, the
// group area and the host area POSIX shared memory. Every step posts this rank's result into the
// group segment and takes every rank's, so that all ranks decide from the same bytes.
class IpcTransport : public Transport {
 public:
  explicit IpcTransport(IpcWhere w) : w_(std::move(w)), h_(*w_.hellos) {}

  // Phase B's post, part 1; a failure is posted by connect(), not returned, so the others learn it.
  Status allocate(Group* g) override {
    localB_ = localBuffers(g, w_.rank, w_.device, w_.seg, &mine_, &whyB_);
    return Status();
  }

  // Phases B (handles, reach, NCCL id, resolved limits) and C (every peer's buffers mapped).
  Status connect(Group* g) override {
    const int nranks = g->nranks, rank = w_.rank;
    Fabric& f = g->fabric;
    localReach(nranks, rank, w_.device, w_.count, h_, &mine_);
    if (rank == 0 && g->ncclPlanned && localB_ == arfuseSuccess) {
      const ncclResult_t nr = ncclGetUniqueId(&mine_.ncclId);
      if (nr != ncclSuccess) {
        localB_ = arfuseNcclError;
        whyB_ = strprintf("ncclGetUniqueId: %s", ncclGetErrorString(nr));
      }
    }
    mine_.oneShotMax = g->policy.oneShotMaxBytes;
    mine_.hostOneShotMax = g->policy.hostOneShotMaxBytes;
    mine_.hostStagedMax = g->policy.hostStagedMaxBytes;
    mine_.lowLatencyMax = g->policy.lowLatencyMaxBytes;
    mine_.ncclAbove = g->policy.ncclAboveBytes;
    mine_.status = localB_;
    setText(mine_.text, whyB_);
    std::vector<uint8_t> all;
    ARFUSE_CHECK(segmentExchange(w_.ia, 1, rank, nranks, &mine_, sizeof mine_, w_.timeoutMs, &all));
    ARFUSE_CHECK(postedFailure<Wire>(all, nranks));
    ws_.resize(nranks);
    std::memcpy(ws_.data(), all.data(), all.size());
    agreeOnPolicy(ws_, w_.configured, w_.ctx, &g->policy);
    f.p2p = true;
    for (int s = 0; s < nranks && f.p2p; ++s)
      for (int t = 0; t < nranks; ++t)
        if (!ws_[s].reach[t]) {
          f.p2p = false;
          f.p2pDetail = ws_[s].reachWhy[0] ? ws_[s].reachWhy : strprintf("rank %d cannot reach rank %d", s, t);
          break;
        }
    Report sc{};
    std::string whyC;
    if (f.p2p && !mapPeers(g, rank, h_, ws_, &whyC)) sc.status = arfuseCudaError;
    setText(sc.text, whyC);
    ARFUSE_CHECK(segmentExchange(w_.ia, 2, rank, nranks, &sc, sizeof sc, w_.timeoutMs, &all));
    ARFUSE_CHECK(postedFailure<Report>(all, nranks));
    return Status();
  }

  // Phases D, E.
  Status prove(Group* g) override { return proveIpcPeers(g, w_.ia, w_.rank, h_, w_.timeoutMs); }

  // Phase F.
  Status nccl(Group* g) override { return initNccl(g, w_.ia, w_.rank, ws_[0].ncclId, w_.timeoutMs, w_.ctx); }

  // Phase G; then every rank has mapped both segments and rank 0 removes their names.
  Status hostArea(Group* g, bool needed) override {
    Report sh{};
    std::string whyH;
    if (needed) {
      const Status mapped = mapHostArea(g, w_.rank, h_, w_.reservedHost, w_.hostName, w_.timeoutMs);
      sh.status = mapped.code();
      whyH = mapped.message();
    }
    setText(sh.text, whyH);
    std::vector<uint8_t> all;
    ARFUSE_CHECK(segmentExchange(w_.ia, 6, w_.rank, g->nranks, &sh, sizeof sh, w_.timeoutMs, &all));
    ARFUSE_CHECK(postedFailure<Report>(all, g->nranks));
    if (w_.rank == 0) {
      shmUnlink(w_.groupName);
      shmUnlink(w_.hostName);
    }
    return Status();
  }

 private:
  IpcWhere w_;
  const std::vector<Hello>& h_;
  Wire mine_{};
  arfuseResult_t localB_ = arfuseSuccess;
  std::string whyB_;
  std::vector<Wire> ws_;
};

}  // namespace

std::unique_ptr<Transport> makeIpcTransport(const IpcWhere& where) {
  return std::unique_ptr<Transport>(new IpcTransport(where));
}

}  // namespace arfuse
