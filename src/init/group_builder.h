// The group builder: the steps of group creation that both init paths share, in one place.
//
//   in-process (comm/comm.cc createGroup)        multi-process (comm/multiprocess.cc)
//   ------------------------------------------   ------------------------------------------------
//   facts of every rank: uuid, arch, residency   phase A: every rank's facts through the rendezvous
//                    \                          /
//                     makeGroup: planGroup (init/group_plan.h: caps, clusters/PDL, resolvePolicy,
//                     workspace sizes, the NCCL plan), the group object, the policy's log lines
//                    /                          \
//   transport: cudaMalloc per rank,              transport: cudaMalloc for the local rank, CUDA IPC
//   peer access enabled and proven (proveP2p)    handles and peer access exchanged through the segment
//   host area: pinned + mapped                   host area: POSIX shared memory registered with CUDA
//                    \                          /
//                     forcedPathUnavailable at each step; then comm/comm.h publishRank: the handle + the init line
//
// What the transports do differs (how buffers are allocated and peers are mapped); every decision
// taken from the facts is made here once.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "init/group.h"
#include "init/group_plan.h"

namespace arfuse {

// Fills what the environment and this process contribute to `facts` (ARFUSE_PDL, the explicit
// limits, ARFUSE_CALIBRATION_FILE, the reported topology when the policy needs it: probed once per
// process), plans the group and creates it. `ctx` labels the policy's log lines. No group on failure.
Status makeGroup(GroupFacts* facts, const LogContext& ctx, Group** out);

// Sizes g->ws from the limits and the fabric (the host part from hostMessageBytes, 0 before the
// host area is decided), and tells the fabric the per-CTA region sizes the plan checks.
void sizeWorkspace(Group* g, long long hostMessageBytes);
// Rank r's device buffers on `device` (staging, control, low-latency, the NCCL sum) and aux stream.
Status allocateRank(Group* g, int r, int device);
size_t hostArenaBytes(int nranks, size_t slotBytes);
long long hostMessageBytesFor(const Group& g);  // largest message the host area of this group carries
// Bytes of the host area for messages up to `messageBytes`.
size_t hostAreaBytesFor(const Group& g, long long messageBytes);
void layoutHostArena(Group* g, char* devBase, long long messageBytes);  // sets g->host, fabric.hostStaged*

// How a group's memory is allocated and its peers are mapped: the part of init the two paths do
// differently. In-process (comm/comm.cc): cudaMalloc for every rank, peer access between the
// devices, a pinned host area, ncclCommInitAll. Multi-process (comm/multiprocess.cc): cudaMalloc
// for the local rank, CUDA IPC handles and views through the group's shared-memory segment, a
// shared-memory host area, ncclCommInitRank; each step ends with an exchange so that every rank
// decides from the same bytes. Each step fails (a Status) only when init cannot survive it;
// a path that does not work is recorded in the fabric (p2p / nccl / hostStaged and their details).
class Transport {
 public:
  virtual ~Transport() = default;
  // The group area (GroupShared) and the buffers of this process's ranks.
  virtual Status allocate(Group* g) = 0;
  // Peer access between the ranks (fabric.p2p, p2pDetail) and, with it, every peer's buffers (g->peers).
  virtual Status connect(Group* g) = 0;
  // Called with peer access: proves it with seeded stores and loads; a failure turns fabric.p2p off.
  virtual Status prove(Group* g) = 0;
  // NCCL, when the plan tries it (g->ncclPlanned): fabric.nccl, or ncclDetail.
  virtual Status nccl(Group* g) = 0;
  // The host exchange area, when `needed` (fabric.hostStaged, or hostStagedDetail); called either way.
  virtual Status hostArea(Group* g, bool needed) = 0;
};

// The init sequence of both paths over a planned group (makeGroup): allocate, connect, prove, NCCL,
// the host area if needed (sized with what NCCL turned out to be), with one WARN line per path that
// turned out unavailable and the forced-path checks after each step.
Status buildGroup(Group* g, Transport* t, const LogContext& ctx);

}  // namespace arfuse
