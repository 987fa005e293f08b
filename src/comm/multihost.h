// Groups that span hosts (arfuseCommInitRank with ranks on several hosts; docs/multihost.md).
//
// A rank of such a group is a rank of its host's intra-host group (the ordinary multi-process
// group over the L ranks of its host, local index = order by global rank: init/host_layout.h),
// plus what crosses hosts, all of it NCCL's: one communicator over every rank (the nccl path, and
// the exchanges of init after phase A) and one per local index j (the ranks with local index j on
// every host: the hierarchical path's all-reduce of slice j). The handle the caller gets is the
// intra-host group's, with Group::multiHost set; arfuseCommRank / Count report the global ones.
#pragma once

#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/multihost_watch.h"
#include "init/host_layout.h"
#include "plan/plan.h"

namespace arfuse {

struct MultiHost {
  int nranks = 0, rank = 0;  // global
  HostLayout layout;
  int hostIndex = 0, localRank = 0;
  Fabric fabric;               // what the plan sees (hosts > 1; the same on every rank)
  PlanPolicy policy;           // the intra-host group's, with the forced algorithm of the config / ARFUSE_ALGO
  ncclComm_t world = nullptr;  // every rank
  ncclComm_t cross = nullptr;  // the ranks with this local index, one per host (rank = host index)
  char* ncclSum = nullptr;     // the nccl path's output (x nranks when deterministic: the all-gather)
  char* in = nullptr;          // hierarchical copy-in, the largest message
  float* slices = nullptr;     // hierarchical fp32 slice of the largest message
  char* peerIn[kMaxRanks] = {};
  float* peerSlices[kMaxRanks] = {};
  // Every NCCL operation across hosts goes through it (comm/multihost_watch.h); registered with
  // the watchdog from the end of init until destroy. world and cross are read and aborted under it.
  std::unique_ptr<MultiHostWatch> watch;
};

// Phase A found ranks on several hosts: builds the group for this rank. `h` are phase A's hellos
// (mp::Hello, as bytes), `exchange` the caller's all-gather when it may be called again (the
// callback path), else null (arfuse's rendezvous, single use: rank 0's hello then carries the
// world NCCL id).
struct MultiHostInit {
  int nranks = 0, rank = 0, device = 0;
  const arfuseConfig_t* config = nullptr;
  std::vector<uint8_t> hellos;  // phase A's bytes
  const Exchange* reusable = nullptr;
};
Status createRankMultiHost(const MultiHostInit& in, arfuseComm_t* comm);

// Rank 0, before phase A: whether its hello carries an NCCL id for a group that may span hosts
// (arfuse's rendezvous over TCP, or ARFUSE_TEST_HOST_ID set), and that id.
bool mayNeedWorldNcclId();

// "local ranks of host test:h1: 0 = global rank 2 1 = global rank 3": appended to the messages of the
// intra-host group's kernel-recorded errors, which name local ranks.
std::string intraHostRanksText(const MultiHost& mh);
// What a failing call of a group that spans hosts appends to its message: intraHostRanksText, and
// for a local rank whose NCCL operation across hosts timed out (kErrNcclTimeout, possibly recorded
// by another process of this host), the ranks it waited with.
std::string multiHostErrorContext(const Group& g);
// What the paths that cross hosts read of such a group: its global ranks and the nccl path's output.
int multiHostRanks(const Group& g);
void* multiHostNcclSum(const Group& g);

// The watch's lines for the state dump (arfuseCommDumpState).
std::vector<std::string> multiHostWatchLines(const Group& g);

}  // namespace arfuse
