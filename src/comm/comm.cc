// Creation (createGroup: facts -> init/group_builder.h over transport/local.h) and teardown of
// in-process groups; teardown, the async-error check and the watchdog's view serve multi-process
// groups too.
//
// Every rank gets, on its own device: a staging buffer of two parities (copy-in target; peers read
// it) and a control block (DeviceState + the flag array peers write into). The group gets one
// host-mapped GroupShared (abort flag + per-rank error records) that every kernel can reach.
// Peer pointers are plain device pointers: the same device (virtual ranks) or a peer device with
// peer access enabled (UVA). Memory is freed when the last rank of the group is destroyed, so a
// peer still finishing its last call never reads freed memory.
#include "comm/comm.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "algos/launch.h"
#include "comm/handles.h"
#include "comm/multihost.h"
#include "common/no_device.h"
#include "common/params.h"
#include "diag/records.h"
#include "diag/watchdog.h"
#include "init/cuda_check.h"
#include "init/group_builder.h"
#include "policy/config.h"
#include "topo/probe_map.h"
#include "transport/local.h"

namespace arfuse {

void freeGroup(Group* g) {
  DeviceScope guard;
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
  bool ok = cudaMemcpyAsync(&g.shared->flight[r], &rr.control->state.flight, sizeof(FlightRing), cudaMemcpyDeviceToHost,
                            rr.aux) == cudaSuccess;
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

arfuseComm* publishRank(Group* g, int rank, int device, int arch) {
  const Fabric& f = g->fabric;
  arfuseComm* c = new arfuseComm();
  c->group = g;
  c->rank = rank;
  c->device = device;
  c->arch = arch;
  commRegister(c);
  const std::string who = g->multiProcess ? strprintf("rank %d of %d (multi-process%s)", rank, g->nranks,
                                                      f.virtualRanks ? ", GPUs shared" : "")
                                          : strprintf("%d ranks%s", g->nranks, f.virtualRanks ? " (virtual)" : "");
  ARFUSE_LOG(kLogInfo, c->logContext(), "",
             "init: %s, staging %zu B, low-latency %zu B, maxBlocks %d, clusters %s, pdl %s, p2p %s, nccl %s, "
             "host area %zu B, one-shot limit %lld B (%s)",
             who.c_str(), g->ws.stagingBytes, g->ws.llBytes, f.maxBlocks, f.clusters ? "yes" : "no",
             f.pdl ? "yes" : "no", f.p2p ? "yes" : "no", f.nccl ? "yes" : "no", g->hostArenaBytes,
             g->policy.oneShotMaxBytes,
             !g->policy.calibratedFrom.empty()  ? g->policy.calibratedFrom.c_str()
             : !g->policy.builtinOrigin.empty() ? g->policy.builtinOrigin.c_str()
                                                : "default or ARFUSE_ONESHOT_MAX_BYTES");
  return c;
}

Status createGroup(int nranks, const int* devices, const arfuseConfig_t* config, arfuseComm_t* comms) {
  if (!comms) return ARFUSE_FAIL(arfuseInvalidArgument, "comms is NULL: pass an array of nranks arfuseComm_t");
  if (nranks < 1 || nranks > kMaxRanks)
    return ARFUSE_FAIL(arfuseInvalidArgument, "nranks=%d: must be 1..%d", nranks, kMaxRanks);
  if (!devices)
    return ARFUSE_FAIL(arfuseInvalidArgument, "devices is NULL: pass an array of nranks CUDA device ordinals");
  ResolvedConfig rc;
  ARFUSE_CHECK(resolveConfig(config, nranks, &rc));

  int count = 0;
  cudaError_t ce = cudaGetDeviceCount(&count);
  if (ce != cudaSuccess || count == 0) {
    cudaGetLastError();
    return ARFUSE_FAIL(arfuseNoDevice, "%s", noDeviceMessage(ce, cudaGetErrorString(ce)).c_str());
  }
  for (int r = 0; r < nranks; ++r)
    if (devices[r] < 0 || devices[r] >= count)
      return ARFUSE_FAIL(arfuseInvalidArgument, "devices[%d]=%d: only devices 0..%d are visible", r, devices[r],
                         count - 1);

  std::vector<int> unique(devices, devices + nranks);
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  DeviceScope guard;
  // The facts of every rank, as a multi-process group gathers them at phase A.
  GroupFacts facts;
  facts.config = rc;
  facts.ranks.resize(nranks);
  for (int d : unique) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess || cudaSetDevice(d) != cudaSuccess) {
      cudaGetLastError();
      return ARFUSE_FAIL(arfuseCudaError, "cudaGetDeviceProperties(%d) failed", d);
    }
    const Residency res = measureResidency();
    if (!res.ok())
      return ARFUSE_FAIL(arfuseUnsupported,
                         "device %d (sm_%d%d): the arfuse kernels cannot run on it (occupancy query failed: %s); "
                         "was the library built for this architecture? see `arfuse version`",
                         d, prop.major, prop.minor, cudaGetErrorString(cudaGetLastError()));
    for (int r = 0; r < nranks; ++r) {
      if (devices[r] != d) continue;
      RankFacts& rf = facts.ranks[r];
      rf.uuid = topo::formatGpuUuid(reinterpret_cast<const unsigned char*>(prop.uuid.bytes));
      rf.arch = prop.major * 10 + prop.minor;
      rf.sms = prop.multiProcessorCount;
      rf.res = res;
    }
  }
  Group* g = nullptr;
  ARFUSE_CHECK(makeGroup(&facts, LogContext{}, &g));
  if (Status st = buildGroup(g, makeInProcessTransport(devices, unique).get(), LogContext{}); !st.ok()) {
    freeGroup(g);
    return st.through(__FILE__, __LINE__);
  }

  g->checkStreams = true;  // api/streams.h: ranks that share a GPU must not share a stream
  startWatching(g);
  g->live = nranks;
  for (int r = 0; r < nranks; ++r) {
    g->ranks[r].arch = facts.ranks[r].arch;
    comms[r] = publishRank(g, r, devices[r], facts.ranks[r].arch);
  }
  return Status();
}

Status destroyComm(arfuseComm_t comm) {
  commUnregister(comm);
  comm->magic = 0;
  Group* g = comm->group;
  Status st;
  {
    DeviceScope guard;
    // Wait for this rank's outstanding calls: peers may still be reading our staging until then.
    if (cudaSetDevice(comm->device) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
      st = ARFUSE_FAIL(arfuseCudaError, "waiting for device %d before destroy: %s", comm->device,
                       cudaGetErrorString(cudaGetLastError()));
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

Status groupAsyncError(const Group& g, int rank, std::string* fields, bool* firstReport) {
  if (firstReport) *firstReport = true;
  if (!readAbort(*g.shared)) return Status();
  propagateAbortToDevices(g);
  if (const int code = g.hostError.load(std::memory_order_acquire)) {  // raised on the host; printed there once
    if (fields) *fields = g.hostErrorFields;
    if (firstReport) *firstReport = false;
    return Status(arfuseResult_t(code), g.hostErrorText);
  }
  // Prefer this rank's own record; else the first rank that recorded one.
  ErrorRecord e{};
  int who = -1;
  if (readErrorRecord(*g.shared, rank, &e)) who = rank;
  for (int r = 0; r < g.nranks && who < 0; ++r)
    if (readErrorRecord(*g.shared, r, &e)) who = r;
  if (who < 0) return Status(arfusePeerTimeout, "the group was aborted (no kernel error record)");
  // A group that spans hosts records local ranks (its kernels run within one host): name them
  // globally, with their host, as every other message of such a group does.
  std::function<std::string(int)> rankName;
  const std::vector<int>& globalOf = g.logRanks;  // empty unless the group spans hosts
  auto global = [&globalOf](int q) { return q >= 0 && q < static_cast<int>(globalOf.size()) ? globalOf[q] : q; };
  if (const MultiHost* mh = g.multiHost.get())
    rankName = [mh, &globalOf](int q) { return describeLocalRank(mh->layout, globalOf, q); };
  std::string message = describeErrorRecord(e, who, g.timeoutNs, rankName) + ". next: " + nextStepFor(e.code);
  // The host's other local ranks, and what any of them waits for across hosts (a local peer stuck in
  // NCCL is why this rank's intra-host wait failed).
  if (g.multiHost) message += "; " + multiHostErrorContext(g);
  if (fields) {
    // The record's fields without its code= (the caller's line carries the code); its peer as the
    // group's log lines name ranks (globally, when it spans hosts).
    ErrorRecord shown = e;
    shown.peer = global(e.peer);
    std::string f = errorRecordFields(shown);
    if (f.rfind("code=", 0) == 0) {
      const size_t sp = f.find(' ');
      f = sp == std::string::npos ? "" : f.substr(sp + 1);
    }
    if (who != rank) f += strprintf(" recorded_by=%d", global(who));
    *fields = f;
  }
  if (firstReport) *firstReport = claimErrorReport(g.shared, rank, e);
  return Status(arfuseResult_t(resultForRecordCode(e.code)), std::move(message));
}

}  // namespace arfuse
