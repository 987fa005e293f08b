// Multi-process communicators: one rank per process (several processes may share a GPU).
//
// Initialisation runs in phases, every rank through every phase even when it has already failed
// locally (it then posts its failure), so that every rank reaches the same decision from the same
// bytes and nobody waits for a rank that has given up:
//   A  (arfuse's rendezvous or the caller's all-gather): facts and resolved config of every rank.
//      Every rank checks the same things (one host, equal configs, no local failure) identically.
//      Before it, rank 0 creates the group segment (POSIX shared memory: GroupShared for the kernels
//      + the exchange area of the later phases) and reserves the host-staged one, under independent
//      random names, so that no other local user can take a name between its publication and its
//      creation (shm.h); its hello carries both names, and the others map the group segment.
//      From the facts every rank makes the init decisions of init/group_plan.h (CTA caps, the
//      policy with ARFUSE_CALIBRATION_FILE and the fabric defaults, workspace sizes), as an
//      in-process group does.
//   B  (through the segment): CUDA IPC handles of each rank's staging/control/low-latency buffers,
//      each rank's view of peer access to every other rank's GPU, rank 0's NCCL id, the plan limits
//      each rank resolved (any difference: every rank uses the configured ones). The group has
//      peer access if every rank can reach every other GPU (or shares it).
//   C  (segment): every rank reports whether it mapped every peer's buffers; any failure fails
//      every rank with that rank's message.
//   D, E (segment, with peer access): the mappings are proven with seeded stores and loads
//      (proveIpcPeers); a failure turns peer access off for every rank.
//   F  (segment): NCCL, when every rank has its own GPU: ncclCommInitRank, then every rank reports;
//      if any failed, every rank drops NCCL (the plan then says why).
//   G  (segment): without peer access (or when forced) rank 0 sizes the host-staged area (smaller
//      when NCCL takes the large messages), which everyone maps and registers with CUDA; every rank
//      reports. Rank 0 then unlinks the segment names: the memory lives while mapped, so a process
//      that dies later leaves nothing in /dev/shm.
// B-G are init/group_builder.h's sequence (buildGroup) over IpcTransport, the same sequence and
// decisions as an in-process group's.
// Every wait is bounded by the init timeout and names the ranks that did not arrive.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "algos/launch.h"
#include "base/status.h"
#include "comm/comm.h"
#include "comm/multihost.h"
#include "common/no_device.h"
#include "common/params.h"
#include "init/group_builder.h"
#include "init/host_layout.h"
#include "init/replica_area.h"
#include "policy/config.h"
#include "topo/probe_map.h"
#include "transport/ipc.h"
#include "transport/mp_protocol.h"
#include "transport/process_cookie.h"
#include "transport/shm.h"

namespace arfuse {
namespace {

using namespace mp;  // NOLINT: this file is the protocol's other half

// Rank 0's segments until the group owns them: released (and their names removed) on every early
// return of init.
struct SegmentsBeforeGroup {
  std::unique_ptr<ShmSegment> group{new ShmSegment()}, host{new ShmSegment()};
  ~SegmentsBeforeGroup() {
    for (ShmSegment* s : {group.get(), host.get()}) {
      if (!s) continue;
      shmRelease(s);
      shmUnlink(s->name);
    }
  }
};

// A segment name that came from rank 0 through the exchange: ours ("/arfuse-..."), never a path.
bool segmentNameOk(const char* name) {
  const std::string n(name, strnlen(name, kShmNameBytes));
  return n.size() < kShmNameBytes && n.rfind("/arfuse-", 0) == 0 && n.find('/', 1) == std::string::npos;
}

// ARFUSE_CHECK_REPLICAS (init/replica_area.h): one slot per rank for residual_in and weight at the
// group's largest call, after the group area and the init area.
size_t replicaSlotBytesFor(const Limits& l) {
  return replicaSlotBytes(l.maxTokens, l.maxHidden, (l.dtypeMask & ARFUSE_DTYPE_BIT(arfuseFloat32)) != 0);
}
size_t groupSegmentBytes(bool checkReplicas, int nranks, const Limits& l) {
  return checkReplicas ? kReplicaAreaOffset + replicaAreaBytes(nranks, replicaSlotBytesFor(l)) : kSegmentBytes;
}

// This rank's hello: its facts and resolved config, or the first local failure (posted, not
// returned, so that the other ranks learn it). Rank 0 also creates the group segment and reserves
// the host-staged one here, before any other process learns their names.
Hello localHello(int nranks, int rank, int device, const arfuseConfig_t* config, bool haveComm,
                 const MultiProcessOptions& options, ResolvedConfig* rcOut, int* countOut,
                 SegmentsBeforeGroup* earlyOut) {
  ResolvedConfig& rc = *rcOut;
  int& count = *countOut;
  SegmentsBeforeGroup& early = *earlyOut;
  Hello me{};
  me.magic = kHelloMagic;
  me.abi = ARFUSE_VERSION_CODE;
  me.nranks = nranks;
  me.rank = rank;
  me.pid = getpid();
  {
    const HostIdentity id = hostIdentity();
    me.hostHash = id.hash;
    me.ipcNamespace = id.ipcNamespace;
    std::snprintf(me.hostLabel, sizeof me.hostLabel, "%s", id.label.c_str());
  }
  me.cookie = processCookie();
  std::string why;
  arfuseResult_t local = arfuseSuccess;
  auto localFail = [&](arfuseResult_t code, const std::string& text) {
    if (local == arfuseSuccess) {
      local = code;
      why = text;
    }
  };
  if (!haveComm) localFail(arfuseInvalidArgument, "comm is NULL: pass the address of an arfuseComm_t");
  {
    if (const Status st = resolveConfig(config, nranks, &rc); !st.ok()) localFail(st.code(), st.message());
    if (options.intraHost) {  // the path is chosen by the group that spans hosts (comm/multihost.h)
      rc.policy.forcedAlgo = arfuseAlgoAuto;
      rc.policy.forcedBy.clear();
    }
  }
  const cudaError_t countError = cudaGetDeviceCount(&count);
  if (countError != cudaSuccess || count == 0) {
    cudaGetLastError();
    localFail(arfuseNoDevice, noDeviceMessage(countError, cudaGetErrorString(countError), " to this process"));
  } else if (device < 0 || device >= count) {
    localFail(arfuseInvalidArgument,
              strprintf("device=%d: only devices 0..%d are visible to this process", device, count - 1));
  }
  if (local == arfuseSuccess) {
    cudaDeviceProp prop;
    if (cudaSetDevice(device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
      localFail(arfuseCudaError, strprintf("device %d: %s", device, cudaGetErrorString(cudaGetLastError())));
    } else {
      std::memcpy(me.uuid, prop.uuid.bytes, 16);
      me.arch = prop.major * 10 + prop.minor;
      me.smCount = prop.multiProcessorCount;
      me.canMapHost = prop.canMapHostMemory;
      const Residency res = measureResidency();
      me.res = res;
      if (!res.ok())
        localFail(arfuseUnsupported, strprintf("device %d (sm_%d): the arfuse kernels cannot run on it; was the "
                                               "library built for this architecture? see `arfuse version`",
                                               device, me.arch));
    }
  }
  me.maxTokens = rc.limits.maxTokens;
  me.maxHidden = rc.limits.maxHidden;
  me.dtypeMask = rc.limits.dtypeMask;
  me.forcedAlgo = rc.policy.forcedAlgo;
  me.timeoutMs = rc.timeoutMs;
  me.maxBlocks = rc.maxBlocks;
  me.oneShotMax = rc.policy.oneShotMaxBytes;
  me.hostOneShotMax = rc.policy.hostOneShotMaxBytes;
  me.hostStagedMax = rc.policy.hostStagedMaxBytes;
  me.deterministic = rc.policy.deterministic ? 1 : 0;
  me.llTwoPhase = rc.policy.llTwoPhase;
  me.llTwoPhaseMax = rc.policy.llTwoPhaseMaxBytes;
  if (rank == 0 && local == arfuseSuccess && !options.intraHost && !options.reusable && mayNeedWorldNcclId()) {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) == ncclSuccess) {
      std::memcpy(me.worldNcclId, &id, sizeof id);
      me.worldNcclSet = 1;
    }
  }
  me.checkReplicas = paramCheckReplicas() ? 1 : 0;
  if (rank == 0 && local == arfuseSuccess) {
    const std::string gname = shmRandomName("g"), hname = shmRandomName("h");
    Status st;
    if (!(st = shmCreate(gname, groupSegmentBytes(me.checkReplicas, nranks, rc.limits), early.group.get())).ok()) {
      localFail(st.code(), "init: group area: " + st.message() +
                               (me.checkReplicas ? " (ARFUSE_CHECK_REPLICAS=1 adds a copy of residual_in and "
                                                   "weight per rank at maxTokens x maxHidden)"
                                                 : ""));
    } else if (!(st = shmReserve(hname, early.host.get())).ok()) {
      localFail(st.code(), "init: host-staged area: " + st.message());
    } else {
      auto* ia0 = reinterpret_cast<InitArea*>(static_cast<char*>(early.group->host) + kSharedBytes);
      ia0->ready.store(kReady, std::memory_order_release);
    }
    std::snprintf(me.groupName, sizeof me.groupName, "%s", gname.c_str());
    std::snprintf(me.hostName, sizeof me.hostName, "%s", hname.c_str());
  }
  me.status = local;
  setText(me.text, why);
  return me;
}

// Phase A's checks, the same on every rank: one arfuse version, one config (hosts: the caller).
Status checkHellos(const std::vector<Hello>& h) {
  for (size_t s = 0; s < h.size(); ++s) {
    if (h[s].magic != kHelloMagic || h[s].abi != ARFUSE_VERSION_CODE)
      return ARFUSE_FAIL(arfuseMismatch, "rank %zu runs another arfuse version (abi %u, this rank %u)", s, h[s].abi,
                         ARFUSE_VERSION_CODE);
#define SAME(field, label)                                                                                           \
  do {                                                                                                               \
    if (h[s].field != h[0].field)                                                                                    \
      return ARFUSE_FAIL(arfuseMismatch,                                                                             \
                         "ranks disagree on the config: rank 0 has %s=%lld, rank %zu has %lld; give every rank the " \
                         "same arfuseConfig_t and ARFUSE_* environment",                                             \
                         label, (long long)h[0].field, s, (long long)h[s].field);                                    \
  } while (0)
    SAME(maxTokens, "maxTokens");
    SAME(maxHidden, "maxHidden");
    SAME(dtypeMask, "dtypeMask");
    SAME(forcedAlgo, "algo");
    SAME(timeoutMs, "timeoutMs");
    SAME(maxBlocks, "maxBlocks");
    SAME(oneShotMax, "ARFUSE_ONESHOT_MAX_BYTES");
    SAME(hostOneShotMax, "ARFUSE_HOST_ONESHOT_MAX_BYTES");
    SAME(hostStagedMax, "ARFUSE_HOST_STAGED_MAX_BYTES");
    SAME(deterministic, "deterministic");
    SAME(llTwoPhase, "ARFUSE_LL_TWO_PHASE");
    SAME(llTwoPhaseMax, "ARFUSE_LL_TWO_PHASE_MAX_BYTES");
    SAME(checkReplicas, "ARFUSE_CHECK_REPLICAS");
#undef SAME
  }
  return Status();
}

// The facts init/group_plan.h plans from, from every rank's hello.
GroupFacts factsFromHellos(const std::vector<Hello>& h, const ResolvedConfig& rc) {
  GroupFacts facts;
  facts.multiProcess = true;
  facts.config = rc;
  facts.ranks.resize(h.size());
  for (size_t s = 0; s < h.size(); ++s) {
    RankFacts& rf = facts.ranks[s];
    rf.uuid = topo::formatGpuUuid(h[s].uuid);
    rf.arch = h[s].arch;
    rf.sms = h[s].smCount;
    rf.res = h[s].res;
  }
  return facts;
}

// Maps the group segment (rank 0 made it before phase A), waits (bounded) until it is ready, and
// sets the group's departure wait.
Status joinSegment(Group* g, int rank, ShmSegment* seg, const std::string& groupName, int timeoutMs, bool checkReplicas,
                   InitArea** iaOut) {
  if (rank != 0)
    ARFUSE_CHECK_PREFIXED("init: ",
                          shmOpen(groupName, groupSegmentBytes(checkReplicas, g->nranks, g->limits), timeoutMs, seg));
  InitArea* ia = *iaOut = reinterpret_cast<InitArea*>(static_cast<char*>(seg->host) + kSharedBytes);
  if (checkReplicas) {
    g->replicaArea = static_cast<char*>(seg->host) + kReplicaAreaOffset;
    g->replicaSlotBytes = replicaSlotBytesFor(g->limits);
  }
  if (rank != 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    while (ia->ready.load(std::memory_order_acquire) != kReady) {
      if (std::chrono::steady_clock::now() > deadline)
        return ARFUSE_FAIL(arfusePeerTimeout, "init: %s never became ready (rank 0 failed or died?)",
                           groupName.c_str());
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  const int nranks = g->nranks;
  g->depart = [ia, nranks, timeoutMs](int r) {
    // Destroy waits (bounded) until every rank has left its last call, so no peer still reads our memory.
    ia->departed[r].store(1, std::memory_order_release);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::min(timeoutMs, 5000));
    for (int s = 0; s < nranks; ++s)
      while (!ia->departed[s].load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
  };
  return Status();
}

}  // namespace

Status createRankMultiProcess(int nranks, int rank, int device, const arfuseConfig_t* config, const Exchange& exchangeA,
                              arfuseComm_t* comm, const MultiProcessOptions& options) {
  ARFUSE_CHECK(checkRankArgs(nranks, rank));  // before anything is indexed by rank
  ResolvedConfig rc;
  int count = 0;
  SegmentsBeforeGroup early;
  const Hello me = localHello(nranks, rank, device, config, comm != nullptr, options, &rc, &count, &early);

  // ---- phase A ------------------------------------------------------------------------------------
  std::vector<uint8_t> all;
  ARFUSE_CHECK(exchangeA(&me, sizeof me, &all));
  if (all.size() != static_cast<size_t>(nranks) * sizeof(Hello))
    return ARFUSE_FAIL(arfuseInternalError, "init: the all-gather returned the wrong number of bytes");
  std::vector<Hello> h(nranks);
  std::memcpy(h.data(), all.data(), all.size());
  ARFUSE_CHECK(postedFailure<Hello>(all, nranks));
  ARFUSE_CHECK(checkHellos(h));
  {
    std::vector<uint64_t> hashes, namespaces;
    std::vector<std::string> labels;
    for (const Hello& x : h) {
      hashes.push_back(x.hostHash);
      namespaces.push_back(x.ipcNamespace);
      labels.emplace_back(x.hostLabel, strnlen(x.hostLabel, sizeof x.hostLabel));
    }
    const std::string conflict = ipcNamespaceConflict(hashes, namespaces, labels);
    if (!conflict.empty()) return ARFUSE_FAIL(arfuseUnsupported, "init: %s", conflict.c_str());
  }
  bool oneHost = true;
  for (const Hello& x : h) oneHost = oneHost && x.hostHash == h[0].hostHash;
  if (!oneHost) {
    if (options.intraHost)
      return ARFUSE_FAIL(arfuseInternalError, "init: the intra-host group found ranks of another host");
    MultiHostInit mi;
    mi.nranks = nranks;
    mi.rank = rank;
    mi.device = device;
    mi.config = config;
    mi.hellos = all;
    mi.reusable = options.reusable ? &exchangeA : nullptr;
    ARFUSE_CHECK(createRankMultiHost(mi, comm));  // rank 0's segments go with `early`
    return Status();
  }
  const int timeoutMs = std::max(30000, rc.timeoutMs);

  // ---- the group, from the same bytes on every rank -----------------------------------------------
  LogContext ctx;
  ctx.rank = rank;
  ctx.device = device;
  ctx.arch = h[rank].arch;
  GroupFacts facts = factsFromHellos(h, rc);
  Group* g = nullptr;
  ARFUSE_CHECK(makeGroup(&facts, ctx, &g));
  if (options.intraHost) {
    g->ncclPlanned = false;
    g->fabric.nccl = false;
    g->fabric.ncclDetail = "the intra-host part of a group that spans hosts: NCCL runs across hosts";
  }
  if (!segmentNameOk(h[0].groupName) || !segmentNameOk(h[0].hostName)) {
    freeGroup(g);
    return ARFUSE_FAIL(arfuseMismatch,
                       "init: rank 0 named shared-memory segments that are not arfuse's; is it running the same "
                       "arfuse release?");
  }
  const std::string groupName(h[0].groupName, strnlen(h[0].groupName, kShmNameBytes));
  const std::string hostName(h[0].hostName, strnlen(h[0].hostName, kShmNameBytes));
  auto fail = [&](Status st) {
    shmUnlink(groupName);
    shmUnlink(hostName);
    freeGroup(g);
    return st.through(__FILE__, __LINE__);
  };
  ShmSegment* seg = early.group.release();
  ShmSegment* reservedHost = early.host.release();
  g->cleanups.push_back([seg, reservedHost] {
    shmRelease(seg);
    shmRelease(reservedHost);
    delete seg;
    delete reservedHost;
  });
  InitArea* ia = nullptr;
  if (Status st = joinSegment(g, rank, seg, groupName, timeoutMs, h[0].checkReplicas != 0, &ia); !st.ok())
    return fail(st);

  // ---- phases B-G (init/group_builder.h buildGroup over this process's transport) -------------------
  const IpcWhere where{rank, device, count, timeoutMs, &h, seg, reservedHost, groupName, hostName, ia, ctx, rc.policy};
  if (Status st = buildGroup(g, makeIpcTransport(where).get(), ctx); !st.ok()) return fail(st);

  g->ranks[rank].arch = h[rank].arch;
  startWatching(g);
  g->live = 1;
  *comm = publishRank(g, rank, device, h[rank].arch);
  return Status();
}

}  // namespace arfuse
