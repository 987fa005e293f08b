// The in-process communicator: a Group shared by the ranks created together, and one Comm per rank.
#pragma once

#include <nccl.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/streams.h"
#include "arfuse/arfuse.h"
#include "device/args.h"
#include "diag/log.h"
#include "diag/watchdog.h"
#include "plan/plan.h"

namespace arfuse {

constexpr uint32_t kCommMagic = 0xA2F05E01u;

struct Group;
struct MultiHost;  // comm/multihost.h

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
  // In-process groups: the stream each rank's last call really ran on (api/streams.h), under
  // streamMu. Two ranks on one GPU must never share a stream, nor pair the legacy default stream
  // with a blocking one: a rank's call waits for its peers' calls, which would queue behind it.
  std::mutex streamMu;
  std::vector<StreamIdentity> lastStream;
  // Host-side state of the opt-in checks (api/replica_check.cc), created on first use under apiMu,
  // and an error the host raised for the whole group (a replica mismatch): reported by
  // groupAsyncError like a kernel-recorded one; text and fields are written before the code.
  std::mutex apiMu;
  std::shared_ptr<void> replicaCheck;
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
  // Set for a group that spans hosts (comm/multihost.h): this is the rank's intra-host group and
  // this what crosses hosts; freed by the cleanups above.
  std::shared_ptr<MultiHost> multiHost;
};

}  // namespace arfuse

// The opaque handle. Validated on every call through a registry of live handles (so a destroyed or
// foreign pointer is never dereferenced) and a magic word.
struct arfuseComm {
  uint32_t magic = arfuse::kCommMagic;
  arfuse::Group* group = nullptr;
  int rank = 0;
  int device = 0;
  int arch = 0;
  int globalRank = -1;  // a group that spans hosts: the rank in the whole group (rank is the local index)
  std::string lastError;
  arfuse::LogContext logContext() const {
    return arfuse::LogContext{globalRank >= 0 ? globalRank : rank, device, arch};
  }
};

namespace arfuse {

// Registry of live handles.
bool commIsLive(const arfuseComm* c);
void commRegister(arfuseComm* c);
void commUnregister(arfuseComm* c);

// Copies local rank r's device flight recorder into g.shared->flight[r] (bounded: gives up after
// `waitMs` if the device does not answer, e.g. a hung kernel); false (and the mirror untouched) then.
bool refreshFlight(const Group& g, int r, int waitMs = 500);
void freeGroup(Group* g);
void startWatching(Group* g);  // ARFUSE_WATCHDOG_MS / ARFUSE_DUMP_ON_SIGNAL: register with the watchdog

// Multi-process creation (multiprocess.cc): one rank of this process. `exchangeA` all-gathers a
// fixed-size blob across the ranks (arfuse's rendezvous or the caller's callback); later phases use
// the group's shared-memory segment.
using Exchange =
    std::function<arfuseResult_t(const void* mine, size_t bytes, std::vector<uint8_t>* all, std::string* message)>;
// `intraHost`: the intra-host part of a group that spans hosts (comm/multihost.h): no forced algorithm
// and no NCCL of its own (NCCL runs on the host-spanning communicators). `reusable`: exchangeA may be
// called again (a framework's all-gather), which a group that spans hosts uses after phase A.
struct MultiProcessOptions {
  bool intraHost = false;
  bool reusable = false;
};
arfuseResult_t createRankMultiProcess(int nranks, int rank, int device, const arfuseConfig_t* config,
                                      const Exchange& exchangeA, arfuseComm_t* comm, std::string* message,
                                      const MultiProcessOptions& options = MultiProcessOptions());

// Creation and teardown (comm.cc). On failure returns the code and fills *message.
arfuseResult_t createGroup(int nranks, const int* devices, const arfuseConfig_t* config, arfuseComm_t* comms,
                           std::string* message);
arfuseResult_t destroyComm(arfuseComm_t comm, std::string* message);

// A kernel-recorded error of the group (arfusePeerTimeout, arfuseMismatch, arfuseInvalidUsage for two
// streams at once), or arfuseSuccess; *message describes it.
// *fields (optional) gets the canonical line's key=value fields of the failed call
// ("call=17 op=AllReduceAddRmsNorm bytes=14336 dtype=bf16 path=oneshot peer=2").
// *firstReport (optional): true the first time this record is reported for this rank (by a call or
// the watchdog), so the canonical line is printed once per failure per rank.
arfuseResult_t groupAsyncError(const Group& g, int rank, std::string* message, std::string* fields = nullptr,
                               bool* firstReport = nullptr);

}  // namespace arfuse
