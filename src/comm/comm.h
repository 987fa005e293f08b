// The communicator: a Group (init/group.h) shared by the ranks created together, and one handle per rank;
// creation, teardown and the registry of live handles.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "base/status.h"
#include "common/log.h"
#include "init/group.h"

namespace arfuse {

constexpr uint32_t kCommMagic = 0xA2F05E01u;

}  // namespace arfuse

// The opaque handle. Validated on every call through a registry of live handles (so a destroyed or
// foreign pointer is never dereferenced) and a magic word.
struct arfuseComm {
  uint32_t magic = arfuse::kCommMagic;
  arfuse::Group* group = nullptr;
  int rank = 0;
  int device = 0;
  int arch = 0;
  int globalRank = -1;  // a group that spans hosts: the rank in the whole group (rank: the local index)
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
// The communicator of local rank `rank` on `device` of a built group (init/group_builder.h
// buildGroup): registered, and the group's init line logged.
arfuseComm* publishRank(Group* g, int rank, int device, int arch);

// Multi-process creation (multiprocess.cc): one rank of this process. `exchangeA` all-gathers a
// fixed-size blob across the ranks (arfuse's rendezvous or the caller's callback); later phases use
// the group's shared-memory segment.
using Exchange = std::function<Status(const void* mine, size_t bytes, std::vector<uint8_t>* all)>;
// `intraHost`: the intra-host part of a group that spans hosts (comm/multihost.h): no forced algorithm
// and no NCCL of its own (NCCL runs on the host-spanning communicators). `reusable`: exchangeA may be
// called again (a framework's all-gather), which a group that spans hosts uses after phase A.
struct MultiProcessOptions {
  bool intraHost = false;
  bool reusable = false;
};
Status createRankMultiProcess(int nranks, int rank, int device, const arfuseConfig_t* config, const Exchange& exchangeA,
                              arfuseComm_t* comm, const MultiProcessOptions& options = MultiProcessOptions());

// Creation and teardown (comm.cc). A failure carries its code and message. destroyComm tears the
// rank down even when it fails (its failure is the wait for the device's outstanding calls).
Status createGroup(int nranks, const int* devices, const arfuseConfig_t* config, arfuseComm_t* comms);
Status destroyComm(arfuseComm_t comm);

// The plan of a call on this group (algos/registry.h makePlan over its fabric, or, for a group that
// spans hosts, over the fabric across hosts: comm/multihost.h); the same function answers
// arfuseCommQueryPlan.
Plan planOn(const Group& g, const PlanRequest& req);

// A kernel-recorded error of the group (arfusePeerTimeout, arfuseMismatch, arfuseInvalidUsage for two
// streams at once) as a failed Status whose message describes it, or an ok Status. A report of a
// recorded error, not one raised here: it has no trail (and logs nothing; it is polled).
// *fields (optional) gets the canonical line's key=value fields of the failed call
// ("call=17 op=AllReduceAddRmsNorm bytes=14336 dtype=bf16 path=oneshot peer=2").
// *firstReport (optional): true the first time this record is reported for this rank (by a call or
// the watchdog), so the canonical line is printed once per failure per rank.
Status groupAsyncError(const Group& g, int rank, std::string* fields = nullptr, bool* firstReport = nullptr);

}  // namespace arfuse
