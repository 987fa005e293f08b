// The group: what the ranks created together share (their fabric, limits and policy, the
// workspace, the peer and host views, NCCL, the host-side state of the checks). Private to the
// library. The init layer (src/init, src/transport, src/comm) builds it field by field; the API
// layer (src/api) reads it only through the named functions at the end of this file.
//
// Why most fields stay public: they are written once, at creation, by many builders (init/
// group_builder.cc, transport/p2p.cc, hostmem.cc, nccl.cc, local.cc, ipc.cc, comm/multiprocess.cc,
// comm/multihost.cc) and freed by comm/comm.cc freeGroup; befriending each of them would make the
// list of friends the list of the init layer, and protect nothing the layer rule does not. The
// fields the issue named -- the peer views (peers), the host area (host, hostArena*), the per-rank
// staging and NCCL communicators (ranks[r].staging, .nccl, .ncclSum) -- are read outside src/init,
// src/transport and src/comm only by fillGroupKernelArgs, rankNccl and rankNcclSum below (a CPU test,
// tests/cpu/layers_test.sh, keeps src/api to that). The state the API layer itself keeps after
// creation (the replica check's, the stream check's) is its own type behind an opaque slot, made
// and read only through groupApiState, under apiMu.
#pragma once

#include <nccl.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algos/shared.h"
#include "common/log.h"
#include "device/args.h"
#include "diag/watchdog.h"
#include "plan/plan.h"

namespace arfuse {

struct MultiHost;  // comm/multihost.h: what a group that spans hosts adds

struct RankResources {
  int device = -1;  // -1: not a rank of this process (multi-process groups)
  int arch = 0;
  char* staging = nullptr;          // Workspace::stagingBytes (per-CTA regions; the NCCL path's sum)
  ControlBlock* control = nullptr;  // device/args.h, zeroed at init
  char* ll = nullptr;               // Workspace::llBytes
  char* ncclSum = nullptr;          // Workspace::ncclBytes (groups that may use NCCL: one GPU per rank)
  ncclComm_t nccl = nullptr;
  cudaStream_t aux = nullptr;  // this rank's own stream for host copies (flight recorder), never a caller's
};

struct Group {
  int nranks = 0;
  Fabric fabric;
  Limits limits;
  PlanPolicy policy;
  uint64_t timeoutNs = 0;
  Workspace ws;                      // per-rank buffer sizes (plan/plan.h workspaceFor)
  GroupShared* shared = nullptr;     // host-mapped group area, host view
  GroupShared* sharedDev = nullptr;  // the same memory as kernels address it
  bool multiProcess = false;         // created by arfuseCommInitRank*: one local rank, peers in other processes
  bool flight = true;                // kernels stamp the flight recorder (ARFUSE_FLIGHT_RECORDER)
  bool ncclPlanned = false;          // init/group_plan.h: every rank has its own GPU, so NCCL is tried
  std::vector<std::function<void()>> cleanups;  // run in reverse order when the group is freed
  std::function<void(int rank)> depart;         // multi-process: bounded wait for every rank to leave, at destroy
  std::unique_ptr<WatchSource> watch;           // registered with the watchdog while the group lives
  // State the API layer keeps per group, created on first use under apiMu (groupApiState below): the
  // opt-in replica check's (api/replica_check.cc) and, in in-process groups (checkStreams, set at
  // creation), the stream each rank's last call ran on (api/streams.h StreamCheck). Then an error the
  // host raised for the whole group (a replica mismatch): reported by groupAsyncError like a
  // kernel-recorded one; text and fields are written before the code.
  std::mutex apiMu;
  std::shared_ptr<void> replicaCheck;
  // Multi-process groups under ARFUSE_CHECK_REPLICAS=1: the replica area in the group's shared
  // segment (api/replicas.h ReplicaArea, zeroed), set by comm/multiprocess.cc; nullptr otherwise.
  void* replicaArea = nullptr;
  size_t replicaSlotBytes = 0;
  std::shared_ptr<void> streamCheck;
  bool checkStreams = false;
  std::atomic<int> hostError{0};                    // arfuseResult_t, 0: none
  mutable std::atomic<bool> deviceAbortSet{false};  // the host copied the abort into the local ranks' device words
  std::string hostErrorText, hostErrorFields;
  // Host-staged exchange area (pinned, mapped into every rank's GPU), when the group has one:
  // per rank a flag array [kMaxCtas][kMaxRanks] of FlagSlots, then per rank its slot
  // (ws.hostSlotBytes: [maxBlocks][2 parities][ws.hostRegionBytes]).
  char* hostArena = nullptr;
  size_t hostArenaBytes = 0;
  HostPtrs host{};
  std::vector<RankResources> ranks;
  PeerPtrs peers{};
  std::atomic<int> live{0};  // communicators not yet destroyed
  // Set for a group that spans hosts (comm/multihost.h): this group is the rank's intra-host
  // group, and this what crosses hosts (freed by the cleanups above).
  std::shared_ptr<MultiHost> multiHost;
  // A group that spans hosts: the global rank of each rank of this (intra-host) group, which log
  // lines show; empty: the ranks are global already.
  std::vector<int> logRanks;
};

// ---- What the API layer reads of a group ----

// The ranks of the intra-host group (a group that spans hosts: of this host).
inline int groupRanks(const Group& g) { return g.nranks; }
inline bool groupHasVirtualRanks(const Group& g) { return g.fabric.virtualRanks; }
// Batch invariance: the NCCL path gathers and sums in rank order.
inline bool groupDeterministic(const Group& g) { return g.policy.deterministic; }
inline int groupSmCount(const Group& g) { return g.fabric.smCount; }
inline bool groupFlightRecorder(const Group& g) { return g.flight; }
inline uint64_t groupTimeoutNs(const Group& g) { return g.timeoutNs; }
inline GroupShared* groupSharedArea(const Group& g) { return g.shared; }
// The same area as kernels address it (its device view).
inline GroupShared* groupSharedDevice(const Group& g) { return g.sharedDev; }
// What a group that spans hosts adds (comm/multihost.h), or nullptr.
inline const MultiHost* groupMultiHost(const Group& g) { return g.multiHost.get(); }

// Local rank r's NCCL communicator and the NCCL path's sum buffer.
inline ncclComm_t rankNccl(const Group& g, int r) { return g.ranks[r].nccl; }
inline void* rankNcclSum(const Group& g, int r) { return g.ranks[r].ncclSum; }

// The group's part of a multi-rank kernel's arguments for rank r: the peer and host views, the
// region sizes, the rank's device state, where waits poll the abort, the timeout, the flight recorder.
inline void fillGroupKernelArgs(const Group& g, int r, KernelArgs* ka) {
  ka->peers = g.peers;
  ka->host = g.host;
  ka->stagingRegionBytes = g.ws.stagingRegionBytes;
  ka->hostRegionBytes = g.ws.hostRegionBytes;
  ka->state = &g.ranks[r].control->state;
  ka->shared = g.sharedDev;
  // Waits poll this rank's device abort word when peers can write it, else the host-mapped one.
  ka->abortPoll = g.fabric.p2p ? &ka->state->abort : reinterpret_cast<const uint32_t*>(&g.sharedDev->abort);
  ka->peerAbort = g.fabric.p2p ? 1 : 0;
  ka->timeoutNs = g.timeoutNs;
  ka->flight = g.flight ? 1 : 0;
  ka->rank = r;
  ka->nranks = g.nranks;
}

// A multi-rank kernel's arguments for a call: the group's part for the call's rank, then the call's.
inline KernelArgs multiRankArgs(const PrepareContext& p) {
  KernelArgs ka{};
  fillGroupKernelArgs(*p.g, p.rank, &ka);
  fillCallKernelArgs(p, &ka);
  return ka;
}
// The prepare step of the paths whose kernels take them as they are (one-shot, two-shot,
// low-latency, host-staged).
inline Status prepareMultiRankArgs(const PrepareContext& p, AlgoLaunch* out) {
  out->args<KernelArgs>() = multiRankArgs(p);
  return Status();
}

// Whether rank r's calls are checked for sharing a stream with another rank of its GPU (in-process
// groups with virtual ranks; api/streams.h).
inline bool groupChecksStreams(const Group& g) { return g.checkStreams && g.fabric.virtualRanks; }
// The CUDA device of local rank r (-1: a rank of another process).
inline int groupRankDevice(const Group& g, int r) { return g.ranks[r].device; }

// Multi-process groups: the shared replica area (nullptr without one) and its slot size.
inline void* groupReplicaArea(const Group& g, size_t* slotBytes) {
  *slotBytes = g.replicaSlotBytes;
  return g.replicaArea;
}

// The device abort words a host-raised abort must reach for local rank r (api/host_abort.h): its own
// and, when the group has peer access, every other rank's (in-process peers or IPC views). Returns
// how many it wrote into out[0..max).
inline int groupDeviceAbortWords(const Group& g, int r, uint32_t** out, int max) {
  int n = 0;
  auto add = [&](ControlBlock* c) {
    if (c && n < max) out[n++] = &c->state.abort;
  };
  add(g.ranks[r].control);
  if (g.fabric.p2p)
    for (int p = 0; p < g.nranks; ++p)
      if (p != r) add(g.peers.control[p]);
  return n;
}

// Multi-process groups: one local rank, peers in other processes.
inline bool groupIsMultiProcess(const Group& g) { return g.multiProcess; }
// The log context of local rank r.
inline LogContext rankLogContext(const Group& g, int r) {
  const int shown = r >= 0 && r < static_cast<int>(g.logRanks.size()) ? g.logRanks[r] : r;
  return LogContext{shown, g.ranks[r].device, g.ranks[r].arch};
}

// The API layer's state in `slot` (&Group::replicaCheck, &Group::streamCheck), made by make() on first use.
template <typename T, typename Make>
T* groupApiState(Group& g, std::shared_ptr<void> Group::*slot, Make make) {
  std::lock_guard<std::mutex> lock(g.apiMu);
  if (!(g.*slot)) g.*slot = make();
  return static_cast<T*>((g.*slot).get());
}

// An error the host raised for the whole group (groupAsyncError reports it like a kernel-recorded one).
inline bool groupHasHostError(const Group& g) { return g.hostError.load(std::memory_order_acquire) != 0; }
// Raises it, once: the text and fields, then the code; one ERROR line (at file:line, for local rank
// r); then the group's host-mapped abort, so that every wait of every rank's kernels ends. Runs on
// CUDA callback threads: no CUDA calls. Nothing if an error was raised already.
// `afterRecord`: rank r's own kernel had recorded an error before this one (the caller looked
// before it wrote a record of its own): that earlier error is the cause and stays what the calls
// report (groupAsyncError prefers a host error); this one is logged as what followed it, and aborts.
inline void raiseHostError(Group& g, int r, arfuseResult_t code, const std::string& text, const std::string& fields,
                           const char* file, int line, bool afterRecord = false) {
  std::lock_guard<std::mutex> lock(g.apiMu);
  if (g.hostError.load(std::memory_order_acquire) != 0) return;
  if (afterRecord) {
    logLine(kLogError, rankLogContext(g, r), strprintf("code=%s %s", arfuseGetErrorName(code), fields.c_str()), file,
            line,
            text + " (after this rank's own earlier error, recorded by its kernel: that one is what its calls report)");
  } else {
    g.hostErrorText = text;
    g.hostErrorFields = fields;
    g.hostError.store(code, std::memory_order_release);
    logLine(kLogError, rankLogContext(g, r), strprintf("code=%s %s", arfuseGetErrorName(code), fields.c_str()), file,
            line, text);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *reinterpret_cast<volatile int*>(&g.shared->abort) = 1;  // every wait of every rank's kernels ends
}

}  // namespace arfuse
