// Creation and teardown of in-process groups.
//
// Every rank gets, on its own device: a staging buffer of two parities (copy-in target; peers read
// it) and a control block (DeviceState + the flag array peers write into). The group gets one
// host-mapped GroupShared (abort flag + per-rank error records) that every kernel can reach.
// Peer pointers are plain device pointers: the same device (virtual ranks) or a peer device with
// peer access enabled (UVA). Memory is freed when the last rank of the group is destroyed, so a
// peer still finishing its last call never reads freed memory.
#include "common/no_device.h"
#include "comm/comm.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/config.h"
#include "comm/handles.h"
#include "common/params.h"
#include "diag/records.h"
#include "diag/watchdog.h"
#include "algos/launch.h"
#include "init/cuda_check.h"
#include "init/group_builder.h"
#include "topo/probe_map.h"

namespace arfuse {
namespace {

struct DeviceGuard {
  int saved = -1;
  DeviceGuard() { cudaGetDevice(&saved); }
  ~DeviceGuard() {
    if (saved >= 0) cudaSetDevice(saved);
  }
};


}  // namespace

void freeGroup(Group* g) {
  DeviceGuard guard;
  if (g->watch) {
    watchdogUnregister(g->watch.get());
    g->watch.reset();
  }
  if (g->shared) forgetErrorReports(g->shared);
  for (RankResources& r : g->ranks) {
    if (r.nccl) ncclCommDestroy(r.nccl);
    if (r.device >= 0) cudaSetDevice(r.device);
    if (r.staging) cudaFree(r.staging);
    if (r.control) cudaFree(r.control);
    if (r.ll) cudaFree(r.ll);
    if (r.ncclSum) cudaFree(r.ncclSum);
    if (r.aux) cudaStreamDestroy(r.aux);
  }
  for (auto it = g->cleanups.rbegin(); it != g->cleanups.rend(); ++it) (*it)();
  delete g;
}

bool refreshFlight(const Group& g, int r, int waitMs) {
  const RankResources& rr = g.ranks[r];
  if (rr.device < 0 || !rr.control || !rr.aux || !g.shared) return false;
  int saved = -1;
  cudaGetDevice(&saved);
  if (saved != rr.device) cudaSetDevice(rr.device);
  bool ok = cudaMemcpyAsync(&g.shared->flight[r], &rr.control->state.flight, sizeof(FlightRing),
                            cudaMemcpyDeviceToHost, rr.aux) == cudaSuccess;
  if (ok) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(waitMs);
    cudaError_t q;
    while ((q = cudaStreamQuery(rr.aux)) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    ok = q == cudaSuccess;
  }
  cudaGetLastError();
  if (saved >= 0 && saved != rr.device) cudaSetDevice(saved);
  return ok;
}

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
  cudaError_t ce = cudaHostAlloc(reinterpret_cast<void**>(&g->hostArena), bytes,
                                 cudaHostAllocMapped | cudaHostAllocPortable);
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
        f.p2pDetail = strprintf("peer access from device %d to device %d is advertised but %s (%u and %u of %zu words "
                                "wrong): ACS or an IOMMU likely",
                                a, b, wrongStore ? "a peer store did not land" : "a peer load returned wrong data",
                                wrongStore, wrongLoad, words);
        return Status();
      }
    }
  }
  return Status();
}

// What the watchdog sees of a group: its local ranks and the host-mapped area.
class GroupWatch : public WatchSource {
 public:
  explicit GroupWatch(const Group* g) : g_(g) {}
  std::vector<DumpInput> snapshot() const override {
    std::vector<DumpInput> out;
    for (int r = 0; r < g_->nranks; ++r) {
      const RankResources& rr = g_->ranks[r];
      if (rr.device < 0) continue;
      if (g_->flight) refreshFlight(*g_, r);  // the kernels stamp device memory; the readers use the mirror
      DumpInput in;
      in.rank = r;
      in.device = rr.device;
      in.nranks = g_->nranks;
      in.arch = rr.arch;
      in.timeoutNs = g_->timeoutNs;
      in.shared = g_->shared;
      out.push_back(in);
    }
    return out;
  }

 private:
  const Group* g_;
};

// In-process groups: one process drives every rank, so every buffer is a plain device pointer
// (the same device for virtual ranks, a peer device with peer access enabled otherwise: UVA).
class InProcessTransport : public Transport {
 public:
  InProcessTransport(const int* devices, std::vector<int> unique)
      : devices_(devices), unique_(std::move(unique)) {}

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

void startWatching(Group* g) {
  const WatchdogOptions o = watchdogOptionsFromEnv();
  if (o.periodMs <= 0 && !o.dumpOnSignal) return;
  g->watch.reset(new GroupWatch(g));
  watchdogRegister(g->watch.get(), o);
}

// Handles are retired, never freed (comm/handles.h): a stale handle can never name a new communicator.
bool commIsLive(const arfuseComm* c) { return handleIsLive(c) && c->magic == kCommMagic; }
void commRegister(arfuseComm* c) { handleRegister(c); }
void commUnregister(arfuseComm* c) { handleRetire(c); }

arfuseResult_t createGroup(int nranks, const int* devices, const arfuseConfig_t* config, arfuseComm_t* comms,
                           std::string* message) {
  if (!comms) return *message = "comms is NULL: pass an array of nranks arfuseComm_t", arfuseInvalidArgument;
  if (nranks < 1 || nranks > kMaxRanks)
    return *message = strprintf("nranks=%d: must be 1..%d", nranks, kMaxRanks), arfuseInvalidArgument;
  if (!devices) return *message = "devices is NULL: pass an array of nranks CUDA device ordinals", arfuseInvalidArgument;
  ResolvedConfig rc;
  arfuseResult_t st = resolveConfig(config, nranks, &rc, message);
  if (st != arfuseSuccess) return st;

  int count = 0;
  cudaError_t ce = cudaGetDeviceCount(&count);
  if (ce != cudaSuccess || count == 0) {
    cudaGetLastError();
    *message = noDeviceMessage(ce, cudaGetErrorString(ce));
    return arfuseNoDevice;
  }
  for (int r = 0; r < nranks; ++r)
    if (devices[r] < 0 || devices[r] >= count)
      return *message = strprintf("devices[%d]=%d: only devices 0..%d are visible", r, devices[r], count - 1),
             arfuseInvalidArgument;

  std::vector<int> unique(devices, devices + nranks);
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  DeviceGuard guard;
  // The facts of every rank, as a multi-process group gathers them at phase A.
  GroupFacts facts;
  facts.config = rc;
  facts.ranks.resize(nranks);
  for (int d : unique) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess || cudaSetDevice(d) != cudaSuccess) {
      cudaGetLastError();
      *message = strprintf("cudaGetDeviceProperties(%d) failed", d);
      return arfuseCudaError;
    }
    const Residency res = measureResidency();
    if (!res.ok()) {
      *message = strprintf("device %d (sm_%d%d): the arfuse kernels cannot run on it (occupancy query failed: %s); "
                           "was the library built for this architecture? see `arfuse version`",
                           d, prop.major, prop.minor, cudaGetErrorString(cudaGetLastError()));
      return arfuseUnsupported;
    }
    for (int r = 0; r < nranks; ++r) {
      if (devices[r] != d) continue;
      RankFacts& rf = facts.ranks[r];
      rf.uuid = topo::formatGpuUuid(reinterpret_cast<const unsigned char*>(prop.uuid.bytes));
      rf.arch = prop.major * 10 + prop.minor;
      rf.sms = prop.multiProcessorCount;
      rf.lowLatency = res.lowLatency;
      rf.narrow = res.narrow;
      rf.wide = res.wide;
      for (int c = 0; c <= kMaxChunks; ++c) rf.clusters[c] = res.clusters[c];
    }
  }
  Group* g = nullptr;
  st = makeGroup(&facts, LogContext{}, &g).into(message);
  if (st != arfuseSuccess) return st;
  InProcessTransport transport(devices, unique);
  st = buildGroup(g, &transport, LogContext{}).into(message);
  if (st != arfuseSuccess) {
    freeGroup(g);
    return st;
  }

  g->lastStream.resize(nranks);
  startWatching(g);
  g->live = nranks;
  for (int r = 0; r < nranks; ++r) {
    g->ranks[r].arch = facts.ranks[r].arch;
    comms[r] = publishRank(g, r, devices[r], facts.ranks[r].arch);
  }
  return arfuseSuccess;
}

arfuseResult_t destroyComm(arfuseComm_t comm, std::string* message) {
  commUnregister(comm);
  comm->magic = 0;
  Group* g = comm->group;
  arfuseResult_t st = arfuseSuccess;
  {
    DeviceGuard guard;
    // Wait for this rank's outstanding calls: peers may still be reading our staging until then.
    if (cudaSetDevice(comm->device) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
      *message = strprintf("waiting for device %d before destroy: %s", comm->device,
                           cudaGetErrorString(cudaGetLastError()));
      st = arfuseCudaError;
    }
  }
  if (g->depart) g->depart(comm->rank);
  comm->group = nullptr;  // the shell stays allocated (retired above), its contents do not
  std::string().swap(comm->lastError);
  if (--g->live == 0) freeGroup(g);
  return st;
}

// An abort the devices of this process's ranks may not have seen: raised on the host (a replica
// mismatch), or by a peer that cannot write their memory (no peer access). Sets each local rank's
// device abort word once, so later kernels -- CUDA-graph replays too -- are refused at entry.
void propagateAbortToDevices(const Group& g) {
  if (g.deviceAbortSet.exchange(true)) return;
  static const uint32_t kOne = 1;
  int saved = -1;
  cudaGetDevice(&saved);
  for (const RankResources& rr : g.ranks) {
    if (rr.device < 0 || !rr.control || !rr.aux) continue;
    cudaSetDevice(rr.device);
    cudaMemcpyAsync(&rr.control->state.abort, &kOne, sizeof kOne, cudaMemcpyHostToDevice, rr.aux);
  }
  cudaGetLastError();
  if (saved >= 0) cudaSetDevice(saved);
}

arfuseResult_t groupAsyncError(const Group& g, int rank, std::string* message, std::string* fields,
                               bool* firstReport) {
  if (firstReport) *firstReport = true;
  if (!readAbort(*g.shared)) return arfuseSuccess;
  propagateAbortToDevices(g);
  if (const int code = g.hostError.load(std::memory_order_acquire)) {  // raised on the host; printed there once
    *message = g.hostErrorText;
    if (fields) *fields = g.hostErrorFields;
    if (firstReport) *firstReport = false;
    return arfuseResult_t(code);
  }
  // Prefer this rank's own record; else the first rank that recorded one.
  ErrorRecord e{};
  int who = -1;
  if (readErrorRecord(*g.shared, rank, &e)) who = rank;
  for (int r = 0; r < g.nranks && who < 0; ++r)
    if (readErrorRecord(*g.shared, r, &e)) who = r;
  if (who < 0) {
    *message = "the group was aborted (no kernel error record)";
    return arfusePeerTimeout;
  }
  *message = describeErrorRecord(e, who, g.timeoutNs) + ". next: " + nextStepFor(e.code);
  if (fields) {
    // The record's fields without its code= (the caller's line carries the code).
    std::string f = errorRecordFields(e);
    if (f.rfind("code=", 0) == 0) {
      const size_t sp = f.find(' ');
      f = sp == std::string::npos ? "" : f.substr(sp + 1);
    }
    if (who != rank) f += strprintf(" recorded_by=%d", who);
    *fields = f;
  }
  if (firstReport) *firstReport = claimErrorReport(g.shared, rank, e);
  return arfuseResult_t(resultForRecordCode(e.code));
}

}  // namespace arfuse
