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
//                     forcedPathUnavailable at each step; publishRank: the handle + the init line
//
// What the transports do differs (how buffers are allocated and peers are mapped); every decision
// taken from the facts is made here once.
#pragma once

#include <string>
#include <vector>

#include "comm/comm.h"
#include "init/group_plan.h"

namespace arfuse {

// Fills what the environment and this process contribute to `facts` (ARFUSE_PDL, the explicit
// limits, ARFUSE_CALIBRATION_FILE, the reported topology when the policy needs it: probed once per
// process), plans the group and creates it. `ctx` labels the policy's log lines. On failure returns
// the code with *message and no group.
arfuseResult_t makeGroup(GroupFacts* facts, const LogContext& ctx, Group** out, std::string* message);

// Sizes g->ws from the limits and the fabric (the host part from hostMessageBytes, 0 before the
// host area is decided), and tells the fabric the per-CTA region sizes the plan checks.
void sizeWorkspace(Group* g, long long hostMessageBytes);
// Rank r's device buffers on `device` (staging, control, low-latency, the NCCL sum) and aux stream.
arfuseResult_t allocateRank(Group* g, int r, int device, std::string* message);
size_t hostArenaBytes(int nranks, size_t slotBytes);
long long hostMessageBytesFor(const Group& g);  // largest message the host area of this group carries
// Bytes of the host area for messages up to `messageBytes`.
size_t hostAreaBytesFor(const Group& g, long long messageBytes);
void layoutHostArena(Group* g, char* devBase, long long messageBytes);  // sets g->host, fabric.hostStaged*

// The communicator of local rank `rank` on `device`: registered, and the group's init line logged.
arfuseComm* publishRank(Group* g, int rank, int device, int arch);

}  // namespace arfuse
