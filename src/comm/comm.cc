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
#include <set>
#include <thread>

#include "comm/config.h"
#include "comm/handles.h"
#include "common/params.h"
#include "diag/records.h"
#include "diag/watchdog.h"
#include "plan/calibration.h"
#include "plan/from_topology.h"
#include "topo/probe.h"
#include "algos/launch.h"

namespace arfuse {
namespace {

struct DeviceGuard {
  int saved = -1;
  DeviceGuard() { cudaGetDevice(&saved); }
  ~DeviceGuard() {
    if (saved >= 0) cudaSetDevice(saved);
  }
};

#define CUDA_TRY(call)                                                                      \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      *message = strprintf("%s failed: %s (%s)", #call, cudaGetErrorString(e_), cudaGetErrorName(e_)); \
      cudaGetLastError();                                                                   \
      return arfuseCudaError;                                                               \
    }                                                                                       \
  } while (0)

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

void sizeWorkspace(Group* g, long long hostMessageBytes) {
  g->ws = workspaceFor(g->limits, g->fabric, hostMessageBytes, g->policy.deterministic);
  g->fabric.stagingRegionBytes = static_cast<long long>(g->ws.stagingRegionBytes);
  g->fabric.hostRegionBytes = static_cast<long long>(g->ws.hostRegionBytes);
  const long long message = static_cast<long long>(g->limits.maxTokens) * static_cast<long long>(g->ws.maxRowBytes);
  g->fabric.lowLatencyMaxBytes = g->nranks > 1 ? std::min<long long>(kLowLatencyMaxBytes, message) : 0;
}

arfuseResult_t allocateRank(Group* g, int r, int device, std::string* message) {
  RankResources& rr = g->ranks[r];
  rr.device = device;
  CUDA_TRY(cudaSetDevice(rr.device));
  CUDA_TRY(cudaMalloc(&rr.staging, g->ws.stagingBytes));
  CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&rr.control), sizeof(ControlBlock)));
  CUDA_TRY(cudaMemset(rr.control, 0, sizeof(ControlBlock)));  // epochs 0, no abort, every flag 0
  if (g->ws.llBytes) {
    CUDA_TRY(cudaMalloc(&rr.ll, g->ws.llBytes));
    CUDA_TRY(cudaMemset(rr.ll, 0, g->ws.llBytes));  // flag 0 never matches a call
    g->peers.ll[r] = rr.ll;
  }
  if (g->ws.ncclBytes && !g->fabric.virtualRanks) CUDA_TRY(cudaMalloc(&rr.ncclSum, g->ws.ncclBytes));
  CUDA_TRY(cudaStreamCreateWithFlags(&rr.aux, cudaStreamNonBlocking));
  g->peers.staging[r] = rr.staging;
  g->peers.control[r] = rr.control;
  CUDA_TRY(cudaDeviceSynchronize());
  return arfuseSuccess;
}

size_t hostArenaBytes(int nranks, size_t slotBytes) {
  return static_cast<size_t>(nranks) * (kHostFlagBytes + slotBytes);
}

long long hostMessageBytesFor(const Group& g) {
  long long m = static_cast<long long>(g.limits.maxTokens) * static_cast<long long>(g.ws.maxRowBytes);
  if (g.fabric.nccl && g.policy.forcedAlgo != arfuseAlgoHostStaged)
    m = std::min<long long>(m, std::max<long long>(g.policy.hostStagedMaxBytes, 16));
  return (m + 255) / 256 * 256;
}

void layoutHostArena(Group* g, char* devBase, long long messageBytes) {
  sizeWorkspace(g, messageBytes);
  const size_t flagBytes = static_cast<size_t>(g->nranks) * kHostFlagBytes;
  g->hostArenaBytes = hostArenaBytes(g->nranks, g->ws.hostSlotBytes);
  for (int r = 0; r < g->nranks; ++r) {
    g->host.flags[r] = reinterpret_cast<FlagSlot*>(devBase + static_cast<size_t>(r) * kHostFlagBytes);
    g->host.slots[r] = devBase + flagBytes + static_cast<size_t>(r) * g->ws.hostSlotBytes;
  }
  g->fabric.hostStaged = true;
  g->fabric.hostStagedCapacity = messageBytes;
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

void setArchFacts(Group* g, int minArch) {
  g->fabric.clusters = minArch >= 90;
  g->fabric.pdl = g->fabric.clusters && paramPdl();
}

namespace {

arfuseResult_t allocateRanks(Group* g, const int* devices, std::string* message) {
  for (int r = 0; r < g->nranks; ++r) {
    arfuseResult_t st = allocateRank(g, r, devices[r], message);
    if (st != arfuseSuccess) return st;
  }
  return arfuseSuccess;
}

// Enables peer access between every pair of distinct devices; fills fabric.p2p / p2pDetail.
arfuseResult_t connectPeers(Group* g, const std::vector<int>& unique, std::string* message) {
  g->fabric.p2p = true;
  for (int a : unique) {
    for (int b : unique) {
      if (a == b) continue;
      int can = 0;
      CUDA_TRY(cudaDeviceCanAccessPeer(&can, a, b));
      if (!can) {
        g->fabric.p2p = false;
        g->fabric.p2pDetail = strprintf("cudaDeviceCanAccessPeer(%d, %d) = 0", a, b);
        return arfuseSuccess;
      }
    }
  }
  for (int a : unique) {
    CUDA_TRY(cudaSetDevice(a));
    for (int b : unique) {
      if (a == b) continue;
      cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();
      } else if (e != cudaSuccess) {
        cudaGetLastError();
        g->fabric.p2p = false;
        g->fabric.p2pDetail = strprintf("cudaDeviceEnablePeerAccess(%d -> %d): %s", a, b, cudaGetErrorString(e));
        return arfuseSuccess;
      }
    }
  }
  return arfuseSuccess;
}

// The host-staged exchange area: one pinned allocation mapped into every device of the group (a
// multi-process group will instead map POSIX shared memory registered with CUDA; the layout and the
// kernels are the same). Sized for messages up to hostSlotBytes per rank.
arfuseResult_t allocateHostArena(Group* g, const std::vector<int>& unique, long long messageBytes,
                                 std::string* message) {
  for (int d : unique) {
    int canMap = 0;
    CUDA_TRY(cudaDeviceGetAttribute(&canMap, cudaDevAttrCanMapHostMemory, d));
    if (!canMap) {
      g->fabric.hostStagedDetail = strprintf("device %d cannot map host memory (cudaDevAttrCanMapHostMemory = 0)", d);
      return arfuseSuccess;
    }
  }
  const size_t bytes =
      hostArenaBytes(g->nranks, workspaceFor(g->limits, g->fabric, messageBytes, g->policy.deterministic).hostSlotBytes);
  cudaError_t ce = cudaHostAlloc(reinterpret_cast<void**>(&g->hostArena), bytes,
                                 cudaHostAllocMapped | cudaHostAllocPortable);
  if (ce != cudaSuccess) {
    cudaGetLastError();
    g->hostArena = nullptr;
    g->fabric.hostStagedDetail = strprintf("cudaHostAlloc(mapped, %zu B) failed: %s", bytes, cudaGetErrorString(ce));
    return arfuseSuccess;  // not fatal: the plan says why the path is missing
  }
  // Zero the flags (counter 0 never matches a call); the slots need no init.
  std::memset(g->hostArena, 0, hostArenaBytes(g->nranks, 0));
  char* arena = g->hostArena;
  g->cleanups.push_back([arena] { cudaFreeHost(arena); });
  layoutHostArena(g, g->hostArena, messageBytes);
  return arfuseSuccess;
}

// Peer access reported is not peer access working (ACS, IOMMU, broken switches): before any path
// relies on it, every ordered pair of distinct devices proves it with a real peer store and a real
// peer load of a seeded pattern, checked word by word. A failure turns the group's P2P off (the
// plan then uses the host-staged path or NCCL) and the reason names the pair.
arfuseResult_t proveP2p(Group* g, std::string* message) {
  Fabric& f = g->fabric;
  std::vector<int> first;  // one rank per distinct device
  for (int r = 0; r < g->nranks; ++r) {
    bool seen = false;
    for (int q : first) seen = seen || g->ranks[q].device == g->ranks[r].device;
    if (!seen) first.push_back(r);
  }
  if (first.size() < 2) return arfuseSuccess;
  const size_t words = std::min<size_t>(4096, g->ws.stagingBytes / 4);
  for (int ra : first) {
    for (int rb : first) {
      if (ra == rb) continue;
      const int a = g->ranks[ra].device, b = g->ranks[rb].device;
      const uint32_t seed = static_cast<uint32_t>(a * 131 + b + 7);
      unsigned* wrong = nullptr;
      unsigned wrongStore = 0, wrongLoad = 0;
      // a stores into b's memory; b checks locally; a loads it back through the peer mapping.
      CUDA_TRY(cudaSetDevice(a));
      CUDA_TRY(cudaMalloc(&wrong, 2 * sizeof(unsigned)));
      CUDA_TRY(cudaMemset(wrong, 0, 2 * sizeof(unsigned)));
      int e = launchProofStore(g->ranks[rb].staging, words, seed);
      if (e == cudaSuccess) e = cudaDeviceSynchronize();
      if (e == cudaSuccess) {
        CUDA_TRY(cudaSetDevice(b));
        unsigned* wrongB = nullptr;
        CUDA_TRY(cudaMalloc(&wrongB, sizeof(unsigned)));
        CUDA_TRY(cudaMemset(wrongB, 0, sizeof(unsigned)));
        e = launchProofCheck(g->ranks[rb].staging, words, seed, wrongB);
        if (e == cudaSuccess) e = cudaMemcpy(&wrongStore, wrongB, sizeof(unsigned), cudaMemcpyDeviceToHost);
        cudaFree(wrongB);
        CUDA_TRY(cudaSetDevice(a));
        if (e == cudaSuccess) e = launchProofCheck(g->ranks[rb].staging, words, seed, wrong + 1);
        if (e == cudaSuccess) e = cudaMemcpy(&wrongLoad, wrong + 1, sizeof(unsigned), cudaMemcpyDeviceToHost);
      }
      cudaFree(wrong);
      if (e != cudaSuccess) {
        cudaGetLastError();
        f.p2p = false;
        f.p2pDetail = strprintf("peer access from device %d to device %d is advertised but failed when used: %s", a, b,
                                cudaGetErrorString(cudaError_t(e)));
        return arfuseSuccess;
      }
      if (wrongStore || wrongLoad) {
        f.p2p = false;
        f.p2pDetail = strprintf("peer access from device %d to device %d is advertised but %s (%u and %u of %zu words "
                                "wrong): ACS or an IOMMU likely",
                                a, b, wrongStore ? "a peer store did not land" : "a peer load returned wrong data",
                                wrongStore, wrongLoad, words);
        return arfuseSuccess;
      }
    }
  }
  return arfuseSuccess;
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

// ARFUSE_CALIBRATION_FILE: measured crossovers for this exact set of GPUs replace the built-in
// limits (the plan's reasons then name the file); an explicit ARFUSE_* limit still wins.
void applyCalibration(Group* g, const int* devices) {
  const std::string path = paramCalibrationFile();
  if (path.empty() || g->nranks < 2) return;
  std::vector<std::string> uuids;
  std::string fingerprint, why;
  if (!topo::groupIdentity(std::vector<int>(devices, devices + g->nranks), &uuids, &fingerprint, &why)) {
    ARFUSE_LOG(kLogWarn, LogContext{}, "", "ARFUSE_CALIBRATION_FILE=%s not used: %s", path.c_str(), why.c_str());
    return;
  }
  if (!loadCalibrationPolicy(path, uuids, fingerprint, g->nranks, &g->policy, &why)) {
    ARFUSE_LOG(kLogWarn, LogContext{}, "", "%s", why.c_str());
    return;
  }
  ARFUSE_LOG(kLogInfo, LogContext{}, "", "%s", why.c_str());
  for (const ParamValue& v : paramValues()) {
    if (!v.fromEnvironment) continue;
    const std::string name = v.spec->name;
    if (name == "ARFUSE_ONESHOT_MAX_BYTES") g->policy.oneShotMaxBytes = paramOneShotMaxBytes();
    if (name == "ARFUSE_HOST_ONESHOT_MAX_BYTES") g->policy.hostOneShotMaxBytes = paramHostOneShotMaxBytes();
    if (name == "ARFUSE_HOST_STAGED_MAX_BYTES") g->policy.hostStagedMaxBytes = paramHostStagedMaxBytes();
  }
}

// Without a calibration and without an explicit ARFUSE_ONESHOT_MAX_BYTES, built-in limits that
// depend on the fabric follow it (plan/from_topology.h: NVLink between every pair of the group's
// GPUs raises one-shot's limit). The facts are the reported ones (CUDA + NVML, no kernels), probed
// once per process; without NVML the general defaults stay. In-process groups only: a multi-process
// group would need every rank to agree, and keeps the general defaults.
void applyFabricDefaultsAtInit(Group* g, const int* devices) {
  if (g->nranks < 2 || !g->policy.calibratedFrom.empty()) return;
  for (const ParamValue& v : paramValues())
    if (v.fromEnvironment && std::string(v.spec->name) == "ARFUSE_ONESHOT_MAX_BYTES") return;
  std::set<int> distinct(devices, devices + g->nranks);
  if (distinct.size() == 1) {
    // Every rank on one GPU (virtual ranks): a peer's rows are local memory, so one-shot's (n - 1)
    // reads cost HBM bandwidth, not link bandwidth (one H200, 2026-12-01 proxy runs: one-shot beat
    // two-shot up to 2.75 MB of peer reads at 4 ranks and lost at 6.4 MB at 8).
    g->policy.oneShotMaxBytes = kOneShotMaxBytesOneGpu;
    g->policy.builtinOrigin = "built-in one-GPU default, not calibrated";
    return;
  }
  if (distinct.size() < 2) return;
  static std::mutex mu;
  static std::unique_ptr<topo::ProbeResult> probed;
  std::lock_guard<std::mutex> lock(mu);
  if (!probed) {
    topo::ProbeOptions opt;
    opt.measure = false;
    probed.reset(new topo::ProbeResult(topo::probeTopology(opt)));
  }
  if (!probed->ok) return;
  if (applyFabricDefaults(probed->topology, std::vector<int>(devices, devices + g->nranks), &g->policy))
    ARFUSE_LOG(kLogInfo, LogContext{}, "", "every pair of the group's GPUs is joined by NVLink: one-shot limit %lld B (%s)",
               g->policy.oneShotMaxBytes, g->policy.builtinOrigin.c_str());
}

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

  DeviceGuard guard;
  Group* g = new Group();
  g->nranks = nranks;
  g->limits = rc.limits;
  g->policy = rc.policy;
  g->flight = paramFlightRecorder();
  applyCalibration(g, devices);
  applyFabricDefaultsAtInit(g, devices);
  g->timeoutNs = static_cast<uint64_t>(rc.timeoutMs) * 1000000ull;
  g->ranks.resize(nranks);

  std::vector<int> unique(devices, devices + nranks);
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  Fabric& f = g->fabric;
  f.nranks = nranks;
  f.virtualRanks = static_cast<int>(unique.size()) < nranks;

  // Co-residency: every rank's blocks on a device must fit at once, or per-block barriers between
  // virtual ranks could wait on blocks that never get scheduled.
  int smCount = 1 << 30;
  int archs[kMaxRanks] = {};
  std::vector<DeviceResidency> residency;
  auto fail = [&](arfuseResult_t s) {
    freeGroup(g);
    return s;
  };
  for (int d : unique) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess || cudaSetDevice(d) != cudaSuccess) {
      cudaGetLastError();
      *message = strprintf("cudaGetDeviceProperties(%d) failed", d);
      return fail(arfuseCudaError);
    }
    for (int r = 0; r < nranks; ++r)
      if (devices[r] == d) archs[r] = prop.major * 10 + prop.minor;
    const Residency res = measureResidency();
    if (!res.ok()) {
      *message = strprintf("device %d (sm_%d%d): the arfuse kernels cannot run on it (occupancy query failed: %s); "
                           "was the library built for this architecture? see `arfuse version`",
                           d, prop.major, prop.minor, cudaGetErrorString(cudaGetLastError()));
      return fail(arfuseUnsupported);
    }
    DeviceResidency dr;
    dr.sms = prop.multiProcessorCount;
    dr.ranks = static_cast<int>(std::count(devices, devices + nranks, d));
    dr.lowLatency = res.lowLatency;
    dr.narrow = res.narrow;
    dr.wide = res.wide;
    for (int c = 2; c <= kMaxChunks; c *= 2) dr.clusters[c] = res.clusters[c];
    residency.push_back(dr);
    smCount = std::min(smCount, prop.multiProcessorCount);
  }
  {
    std::string why;
    if (!setBlockCaps(residency, rc.maxBlocks, &f, &why)) {
      *message = why;
      return fail(arfuseUnsupported);
    }
  }
  f.smCount = smCount;
  setArchFacts(g, *std::min_element(archs, archs + nranks));
  sizeWorkspace(g, 0);  // staging and low-latency buffers; the host part once the host area is decided

  st = connectPeers(g, unique, message);
  if (st != arfuseSuccess) return fail(st);
  if (!f.p2p)
    ARFUSE_LOG(kLogWarn, LogContext{}, "path=lowlatency,oneshot,twoshot", "disabled: %s -> fallback=hoststaged,nccl",
               f.p2pDetail.c_str());

  ce = cudaHostAlloc(reinterpret_cast<void**>(&g->shared), sizeof(GroupShared),
                     cudaHostAllocMapped | cudaHostAllocPortable);
  if (ce != cudaSuccess) {
    cudaGetLastError();
    g->shared = nullptr;
    *message = strprintf("cudaHostAlloc(mapped, %zu B) failed: %s", sizeof(GroupShared), cudaGetErrorString(ce));
    return fail(arfuseCudaError);
  }
  std::memset(g->shared, 0, sizeof(GroupShared));
  g->sharedDev = g->shared;  // UVA: the mapped allocation has one address
  {
    GroupShared* sh = g->shared;
    g->cleanups.push_back([sh] { cudaFreeHost(sh); });
  }
  st = allocateRanks(g, devices, message);
  if (st != arfuseSuccess) return fail(st);
  if (f.p2p) {
    st = proveP2p(g, message);
    if (st != arfuseSuccess) return fail(st);
    if (!f.p2p)
      ARFUSE_LOG(kLogWarn, LogContext{}, "path=lowlatency,oneshot,twoshot", "disabled: %s -> fallback=hoststaged,nccl",
                 f.p2pDetail.c_str());
  }

  if (nranks > 1 && !f.virtualRanks) {
    std::vector<ncclComm_t> nc(nranks);
    ncclResult_t nr = ncclCommInitAll(nc.data(), nranks, devices);
    if (nr == ncclSuccess) {
      f.nccl = true;
      for (int r = 0; r < nranks; ++r) g->ranks[r].nccl = nc[r];
    } else {
      f.ncclDetail = strprintf("ncclCommInitAll: %s", ncclGetErrorString(nr));
      ARFUSE_LOG(kLogWarn, LogContext{}, "path=nccl", "disabled: %s", f.ncclDetail.c_str());
    }
  } else {
    f.ncclDetail = nranks == 1 ? "a single rank needs no NCCL"
                               : "NCCL needs one device per rank; this group has virtual ranks (a device repeats)";
  }
  // Host staging: needed when peers cannot reach each other, or asked for. With NCCL available it
  // serves messages up to the policy's host-staged limit (NCCL beyond), so the pinned area stays
  // small; without NCCL, or when forced, it must carry the largest message.
  const bool forcedHost = g->policy.forcedAlgo == arfuseAlgoHostStaged;
  if (nranks > 1 && (!f.p2p || forcedHost)) {
    st = allocateHostArena(g, unique, hostMessageBytesFor(*g), message);
    if (st != arfuseSuccess) return fail(st);
    if (!f.hostStaged) ARFUSE_LOG(kLogWarn, LogContext{}, "path=hoststaged", "disabled: %s", f.hostStagedDetail.c_str());
  } else {
    f.hostStagedDetail = nranks == 1 ? "a single rank needs no exchange"
                                     : "peer access works, so no host exchange area is allocated (force "
                                       "algo=hoststaged to get one)";
  }
  if (forcedHost && !f.hostStaged) {
    *message = strprintf("config: algo=hoststaged (forced by %s) is unavailable: %s", g->policy.forcedBy.c_str(),
                         f.hostStagedDetail.c_str());
    return fail(arfuseUnsupported);
  }
  if (g->policy.forcedAlgo == arfuseAlgoNccl && !f.nccl) {
    *message = strprintf("config: algo=nccl (forced by %s) is unavailable: %s", g->policy.forcedBy.c_str(),
                         f.ncclDetail.c_str());
    return fail(arfuseUnsupported);
  }
  if ((g->policy.forcedAlgo == arfuseAlgoOneShot || g->policy.forcedAlgo == arfuseAlgoTwoShot ||
       g->policy.forcedAlgo == arfuseAlgoLowLatency) &&
      !f.p2p) {
    *message = strprintf("config: algo=%s (forced by %s) needs peer access: %s",
                         arfuseAlgoName(arfuseAlgo_t(g->policy.forcedAlgo)), g->policy.forcedBy.c_str(),
                         f.p2pDetail.c_str());
    return fail(arfuseUnsupported);
  }

  for (int r = 0; r < nranks; ++r) g->ranks[r].arch = archs[r];
  g->lastStream.resize(nranks);
  startWatching(g);
  g->live = nranks;
  for (int r = 0; r < nranks; ++r) {
    arfuseComm* c = new arfuseComm();
    c->group = g;
    c->rank = r;
    c->device = devices[r];
    c->arch = archs[r];
    commRegister(c);
    comms[r] = c;
    ARFUSE_LOG(kLogInfo, c->logContext(), "",
               "init: %d ranks%s, staging %zu B, low-latency %zu B, maxBlocks %d, clusters %s, pdl %s, p2p %s, nccl %s, "
               "host area %zu B",
               nranks, f.virtualRanks ? " (virtual)" : "", g->ws.stagingBytes, g->ws.llBytes, f.maxBlocks,
               f.clusters ? "yes" : "no", f.pdl ? "yes" : "no", f.p2p ? "yes" : "no",
               f.nccl ? "yes" : "no", g->hostArenaBytes);
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
