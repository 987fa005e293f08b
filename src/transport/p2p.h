// Peer-to-peer memory (p2p.cc): enable, prove, and (multi-process) IPC handles -> peer views.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "init/group.h"
#include "init/group_plan.h"  // proofVerdict
#include "transport/mp_protocol.h"

namespace arfuse {

// In-process: enables peer access between every pair of distinct devices; fills fabric.p2p / p2pDetail.
Status connectPeers(Group* g, const std::vector<int>& unique);
// In-process: every ordered pair of distinct devices stores and loads a seeded pattern through the
// peer mapping; wrong data turns fabric.p2p off and names the pair, a CUDA error fails the group
// (proofVerdict).
Status proveP2p(Group* g);

// Multi-process, phase B: this rank's buffers as IPC handles (+ raw pointers) in its post.
Status exportIpcHandles(const RankResources& rr, mp::Wire* w);
// Multi-process, phase B: this rank's view of peer access to each rank's GPU (by UUID), enabled
// where it exists.
void localReach(int nranks, int rank, int device, int count, const std::vector<mp::Hello>& h, mp::Wire* w);
// Multi-process, phase C: every peer's buffers opened into g->peers (raw pointers for ranks of
// this process).
Status mapPeers(Group* g, int rank, const std::vector<mp::Hello>& h, const std::vector<mp::Wire>& ws);
// Multi-process, phases D and E: the IPC mappings proven; every rank turns P2P off together, or
// every rank fails together (proofVerdict).
Status proveIpcPeers(Group* g, mp::InitArea* ia, int rank, const std::vector<mp::Hello>& h, int timeoutMs);

}  // namespace arfuse
