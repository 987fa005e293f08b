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

#include "common/no_device.h"
#include "comm/comm.h"
#include "comm/config.h"
#include "comm/process_cookie.h"
#include "api/validate.h"
#include "comm/shm.h"
#include "common/params.h"
#include "algos/launch.h"
#include "core/status.h"
#include "init/group_builder.h"
#include "topo/probe_map.h"

namespace arfuse {
namespace {

constexpr uint32_t kHelloMagic = 0xA2F0B007u;
constexpr int kTextBytes = 240;
constexpr int kPhases = 7;  // B = 1 ... G = 6 through the segment (A goes through the rendezvous)
constexpr size_t kSlotBytes = 1024;
constexpr uint32_t kReady = 0x5EADu;

struct Hello {
  uint32_t magic;
  uint32_t abi;
  int32_t nranks;
  int32_t rank;
  int32_t status;  // arfuseResult_t of this rank's local checks
  char text[kTextBytes];
  uint8_t uuid[16];
  uint64_t hostHash;
  uint64_t cookie;  // processCookie(): equal only for ranks of this very process (PIDs repeat across namespaces)
  int64_t pid;      // not an identity (see cookie); kept for post-mortems of the exchanged bytes
  char groupName[32];  // rank 0: the segments it created (shmRandomName)
  char hostName[32];
  int32_t arch, smCount, canMapHost;
  int32_t resLowLatency, resNarrow, resWide, resClusters[kMaxChunks + 1];  // algos/launch.h Residency
  int32_t maxTokens, maxHidden, forcedAlgo, timeoutMs, maxBlocks;
  uint32_t dtypeMask;
  int64_t oneShotMax, hostOneShotMax, hostStagedMax;
  int32_t deterministic;
};

struct Wire {
  int32_t status;
  char text[kTextBytes];
  uint8_t reach[kMaxRanks];  // 1: this rank can load/store rank s's memory (peer access, or the same GPU)
  char reachWhy[96];         // why not, for the first rank it cannot reach
  cudaIpcMemHandle_t staging, control, ll;
  uint64_t stagingPtr, controlPtr, llPtr;  // raw, for a rank of the same process (same cookie)
  ncclUniqueId ncclId;                      // rank 0
  // The plan limits this rank resolved (policy/resolve.h: its calibration file, its view of the
  // fabric): every rank must use the same ones, or their plans, and so their calls, could diverge.
  int64_t oneShotMax, hostOneShotMax, hostStagedMax, lowLatencyMax, ncclAbove;
};
static_assert(sizeof(Wire) <= kSlotBytes, "Wire must fit a slot");

struct Report {  // a rank's posted outcome of a phase
  int32_t status;
  char text[kTextBytes];
};

struct InitArea {
  std::atomic<uint32_t> ready;
  std::atomic<uint32_t> phase[kMaxRanks];
  std::atomic<uint32_t> departed[kMaxRanks];
  alignas(64) char slots[kPhases][kMaxRanks][kSlotBytes];
};

constexpr size_t kSharedBytes = (sizeof(GroupShared) + 4095) / 4096 * 4096;
constexpr size_t kSegmentBytes = kSharedBytes + sizeof(InitArea);

void setText(char* dst, const std::string& s) {
  std::snprintf(dst, kTextBytes, "%s", s.c_str());
}

uint64_t hostHash() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  uint64_t h = 1469598103934665603ull;
  for (const std::string& s : {std::string(name), boot})
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

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
  const std::string n(name, strnlen(name, 32));
  return n.size() < 32 && n.rfind("/arfuse-", 0) == 0 && n.find('/', 1) == std::string::npos;
}

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

// The first failure among the ranks' posted statuses, as every rank will report it.
template <typename T>
bool firstFailure(const std::vector<uint8_t>& all, int nranks, arfuseResult_t* code, std::string* message) {
  for (int s = 0; s < nranks; ++s) {
    const T* t = reinterpret_cast<const T*>(all.data() + s * sizeof(T));
    if (t->status != arfuseSuccess) {
      *code = arfuseResult_t(t->status);
      *message = strprintf("rank %d: %.*s", s, kTextBytes, t->text);
      return true;
    }
  }
  return false;
}

// The same as a Status: every rank fails with the first failing rank's code and text.
template <typename T>
Status postedFailure(const std::vector<uint8_t>& all, int nranks) {
  arfuseResult_t code;
  std::string text;
  if (firstFailure<T>(all, nranks, &code, &text)) return ARFUSE_FAIL(code, "%s", text.c_str());
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
  auto cudaText = [](int e) { return cudaGetErrorString(cudaError_t(e)); };
  Report mine{};
  std::string why;
  cudaSetDevice(g->ranks[rank].device);
  for (int s = 0; s < n && why.empty() && words > 0; ++s) {
    if (!other(s)) continue;
    int e = launchProofStore(g->peers.staging[s] + rank * slice, words, seedOf(rank, s));
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
      why = strprintf("peer access from rank %d to rank %d's GPU (IPC mapping) is advertised but a store through it "
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
        why = strprintf("peer access between ranks %d and %d (IPC mapping) is advertised but %s (%u and %u of %zu "
                        "words wrong): ACS or an IOMMU likely",
                        count[0] ? s : rank, count[0] ? rank : s,
                        count[0] ? "a peer store did not land" : "a peer load returned wrong data", count[0], count[1],
                        words);
      }
    }
    if (e != cudaSuccess && why.empty())
      why = strprintf("rank %d could not check peer access: %s", rank, cudaText(e));
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

// This rank's hello: its facts and resolved config, or the first local failure (posted, not
// returned, so that the other ranks learn it). Rank 0 also creates the group segment and reserves
// the host-staged one here, before any other process learns their names.
Hello localHello(int nranks, int rank, int device, const arfuseConfig_t* config, bool haveComm, ResolvedConfig* rcOut,
                 int* countOut, SegmentsBeforeGroup* earlyOut) {
  ResolvedConfig& rc = *rcOut;
  int& count = *countOut;
  SegmentsBeforeGroup& early = *earlyOut;
  Hello me{};
  me.magic = kHelloMagic;
  me.abi = ARFUSE_VERSION_CODE;
  me.nranks = nranks;
  me.rank = rank;
  me.pid = getpid();
  me.hostHash = hostHash();
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
    std::string m;
    if (resolveConfig(config, nranks, &rc, &m) != arfuseSuccess) localFail(arfuseInvalidArgument, m);
  }
  const cudaError_t countError = cudaGetDeviceCount(&count);
  if (countError != cudaSuccess || count == 0) {
    cudaGetLastError();
    localFail(arfuseNoDevice, noDeviceMessage(countError, cudaGetErrorString(countError), " to this process"));
  } else if (device < 0 || device >= count) {
    localFail(arfuseInvalidArgument, strprintf("device=%d: only devices 0..%d are visible to this process", device,
                                               count - 1));
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
      me.resLowLatency = res.lowLatency;
      me.resNarrow = res.narrow;
      me.resWide = res.wide;
      for (int c = 0; c <= kMaxChunks; ++c) me.resClusters[c] = res.clusters[c];
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
  if (rank == 0 && local == arfuseSuccess) {
    std::string err;
    const std::string gname = shmRandomName("g"), hname = shmRandomName("h");
    if (!shmCreate(gname, kSegmentBytes, early.group.get(), &err)) {
      localFail(arfuseSystemError, "init: group area: " + err);
    } else if (!shmReserve(hname, early.host.get(), &err)) {
      localFail(arfuseSystemError, "init: host-staged area: " + err);
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

// Phase A's checks, the same on every rank: one arfuse version, one host, one config.
Status checkHellos(const std::vector<Hello>& h) {
  for (size_t s = 0; s < h.size(); ++s) {
    if (h[s].magic != kHelloMagic || h[s].abi != ARFUSE_VERSION_CODE)
      return ARFUSE_FAIL(arfuseMismatch, "rank %zu runs another arfuse version (abi %u, this rank %u)", s, h[s].abi,
                         ARFUSE_VERSION_CODE);
    if (h[s].hostHash != h[0].hostHash)
      return ARFUSE_FAIL(arfuseUnsupported,
                         "rank %zu is on another host than rank 0: arfuse groups span one host (use NCCL across hosts)",
                         s);
#define SAME(field, label)                                                                                     \
  if (h[s].field != h[0].field)                                                                              \
    return ARFUSE_FAIL(arfuseMismatch,                                                                       \
                       "ranks disagree on the config: rank 0 has %s=%lld, rank %zu has %lld; give every rank the " \
                       "same arfuseConfig_t and ARFUSE_* environment",                                       \
                       label, (long long)h[0].field, s, (long long)h[s].field);
    SAME(maxTokens, "maxTokens") SAME(maxHidden, "maxHidden") SAME(dtypeMask, "dtypeMask")
    SAME(forcedAlgo, "algo") SAME(timeoutMs, "timeoutMs") SAME(maxBlocks, "maxBlocks")
    SAME(oneShotMax, "ARFUSE_ONESHOT_MAX_BYTES") SAME(hostOneShotMax, "ARFUSE_HOST_ONESHOT_MAX_BYTES")
    SAME(hostStagedMax, "ARFUSE_HOST_STAGED_MAX_BYTES") SAME(deterministic, "deterministic")
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
    rf.lowLatency = h[s].resLowLatency;
    rf.narrow = h[s].resNarrow;
    rf.wide = h[s].resWide;
    for (int c = 0; c <= kMaxChunks; ++c) rf.clusters[c] = h[s].resClusters[c];
  }
  return facts;
}

// Maps the group segment (rank 0 made it before phase A), waits (bounded) until it is ready, and
// sets the group's departure wait.
Status joinSegment(Group* g, int rank, ShmSegment* seg, const std::string& groupName, int timeoutMs,
                   InitArea** iaOut) {
  std::string err;
  if (rank != 0 && !shmOpen(groupName, kSegmentBytes, timeoutMs, seg, &err))
    return ARFUSE_FAIL(arfuseSystemError, "init: %s", err.c_str());
  InitArea* ia = *iaOut = reinterpret_cast<InitArea*>(static_cast<char*>(seg->host) + kSharedBytes);
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
        std::snprintf(w->reachWhy, sizeof w->reachWhy, "cudaDeviceEnablePeerAccess(%d -> %d): %s", device,
                      ordinalOf[s], cudaGetErrorString(e));
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
  struct Where {
    int rank, device, count, timeoutMs;
    const std::vector<Hello>* hellos;
    ShmSegment *seg, *reservedHost;
    std::string groupName, hostName;
    InitArea* ia;
    LogContext ctx;
    PlanPolicy configured;  // what every rank falls back to if their resolved limits differ
  };
  explicit IpcTransport(Where w) : w_(std::move(w)), h_(*w_.hellos) {}

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
  Where w_;
  const std::vector<Hello>& h_;
  Wire mine_{};
  arfuseResult_t localB_ = arfuseSuccess;
  std::string whyB_;
  std::vector<Wire> ws_;
};

}  // namespace

arfuseResult_t createRankMultiProcess(int nranks, int rank, int device, const arfuseConfig_t* config,
                                      const Exchange& exchangeA, arfuseComm_t* comm, std::string* message) {
  {
    const std::string bad = checkRankArgs(nranks, rank);  // before anything is indexed by rank
    if (!bad.empty()) return *message = bad, arfuseInvalidArgument;
  }
  ResolvedConfig rc;
  int count = 0;
  SegmentsBeforeGroup early;
  const Hello me = localHello(nranks, rank, device, config, comm != nullptr, &rc, &count, &early);

  // ---- phase A ------------------------------------------------------------------------------------
  std::vector<uint8_t> all;
  arfuseResult_t st = exchangeA(&me, sizeof me, &all, message);
  if (st != arfuseSuccess) return st;
  if (all.size() != static_cast<size_t>(nranks) * sizeof(Hello))
    return *message = "init: the all-gather returned the wrong number of bytes", arfuseInternalError;
  std::vector<Hello> h(nranks);
  std::memcpy(h.data(), all.data(), all.size());
  if (firstFailure<Hello>(all, nranks, &st, message)) return st;
  st = checkHellos(h).into(message);
  if (st != arfuseSuccess) return st;
  const int timeoutMs = std::max(30000, rc.timeoutMs);

  // ---- the group, from the same bytes on every rank -----------------------------------------------
  LogContext ctx;
  ctx.rank = rank;
  ctx.device = device;
  ctx.arch = h[rank].arch;
  GroupFacts facts = factsFromHellos(h, rc);
  Group* g = nullptr;
  st = makeGroup(&facts, ctx, &g).into(message);
  if (st != arfuseSuccess) return st;
  if (!segmentNameOk(h[0].groupName) || !segmentNameOk(h[0].hostName)) {
    freeGroup(g);
    return *message = "init: rank 0 named shared-memory segments that are not arfuse's; is it running the same "
                      "arfuse release?",
           arfuseMismatch;
  }
  const std::string groupName(h[0].groupName, strnlen(h[0].groupName, 32));
  const std::string hostName(h[0].hostName, strnlen(h[0].hostName, 32));
  auto fail = [&](arfuseResult_t code) {
    shmUnlink(groupName);
    shmUnlink(hostName);
    freeGroup(g);
    return code;
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
  st = joinSegment(g, rank, seg, groupName, timeoutMs, &ia).into(message);
  if (st != arfuseSuccess) return fail(st);

  // ---- phases B-G (init/group_builder.h buildGroup over this process's transport) -------------------
  IpcTransport::Where where{rank, device, count, timeoutMs, &h, seg, reservedHost, groupName, hostName, ia, ctx,
                            rc.policy};
  IpcTransport transport(where);
  st = buildGroup(g, &transport, ctx).into(message);
  if (st != arfuseSuccess) return fail(st);

  g->ranks[rank].arch = h[rank].arch;
  startWatching(g);
  g->live = 1;
  *comm = publishRank(g, rank, device, h[rank].arch);
  return arfuseSuccess;
}

}  // namespace arfuse
