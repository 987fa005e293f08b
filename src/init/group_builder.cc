#include "init/group_builder.h"

#include <cuda_runtime.h>

#include <memory>
#include <mutex>

#include "algos/registry.h"
#include "common/params.h"
#include "init/cuda_check.h"
#include "topo/probe.h"

namespace arfuse {
namespace {

// Reported facts (CUDA + NVML, no kernels, a few ms), probed once per process: they do not change
// while it runs. A failed probe fails with its error (the caller decides whether the group needs it).
Status reportedTopology(const topo::Topology** out) {
  static std::mutex mu;
  static std::unique_ptr<topo::ProbeResult> probed;
  std::lock_guard<std::mutex> lock(mu);
  if (!probed) {
    topo::ProbeOptions opt;
    opt.measure = false;
    probed.reset(new topo::ProbeResult(topo::probeTopology(opt)));
  }
  if (!probed->ok) return ARFUSE_FAIL(arfuseSystemError, "%s", probed->error.c_str());
  *out = &probed->topology;
  return Status();
}

}  // namespace

Status makeGroup(GroupFacts* facts, const LogContext& ctx, Group** out) {
  facts->pdl = paramPdl();
  facts->explicitEnv = explicitLimitsFromEnv();
  facts->calibrationFile = paramCalibrationFile();
  if (groupNeedsTopology(*facts)) {
    // Without a topology the group still forms on its defaults; planGroup reads the error as a fact.
    const Status probed = reportedTopology(&facts->topology);
    if (!probed.ok()) facts->topologyError = probed.message();
  }
  GroupPlan p = planGroup(*facts);
  if (p.status != arfuseSuccess) return ARFUSE_FAIL(p.status, "%s", p.error.c_str());
  for (const PolicyNote& n : p.notes) ARFUSE_LOG(n.level, ctx, "", "%s", n.text.c_str());
  Group* g = new Group();
  g->multiProcess = facts->multiProcess;
  g->nranks = static_cast<int>(facts->ranks.size());
  g->fabric = p.fabric;
  g->limits = p.limits;
  g->policy = p.policy;
  g->ws = p.ws;
  g->timeoutNs = p.timeoutNs;
  g->flight = paramFlightRecorder();
  g->ncclPlanned = p.ncclPlanned;
  g->ranks.resize(g->nranks);
  *out = g;
  return Status();
}

Status buildGroup(Group* g, Transport* t, const LogContext& ctx) {
  Fabric& f = g->fabric;
  auto forced = [&](ForcedCheck which) {
    const std::string why = forcedPathUnavailable(g->policy, f, which);
    return why.empty() ? Status() : ARFUSE_FAIL(arfuseUnsupported, "%s", why.c_str());
  };
  auto p2pOff = [&] {
    f.lowLatencyMaxBytes = 0;
    ARFUSE_LOG(kLogWarn, ctx, "path=lowlatency,oneshot,twoshot", "disabled: %s -> fallback=hoststaged,nccl",
               f.p2pDetail.c_str());
  };
  ARFUSE_CHECK(t->allocate(g));
  ARFUSE_CHECK(t->connect(g));
  if (!f.p2p && g->nranks > 1) p2pOff();
  ARFUSE_CHECK(forced(ForcedCheck::kPeerAccess));
  if (f.p2p && g->nranks > 1) {
    ARFUSE_CHECK(t->prove(g));
    if (!f.p2p) p2pOff();
    ARFUSE_CHECK(forced(ForcedCheck::kPeerAccess));
  }
  if (g->ncclPlanned) ARFUSE_CHECK(t->nccl(g));
  ARFUSE_CHECK(forced(ForcedCheck::kNccl));
  // Host staging: needed when peers cannot reach each other, or asked for. With NCCL available it
  // serves messages up to the policy's host-staged limit (NCCL beyond), so the area stays small;
  // without NCCL, or when forced, it must carry the largest message.
  const bool needed = needsHostArea(g->nranks, f, g->policy, &f.hostStagedDetail);
  ARFUSE_CHECK(t->hostArea(g, needed));
  if (needed && !f.hostStaged) ARFUSE_LOG(kLogWarn, ctx, "path=hoststaged", "disabled: %s", f.hostStagedDetail.c_str());
  return forced(ForcedCheck::kHostStaged);
}

void sizeWorkspace(Group* g, long long hostMessageBytes) {
  sizeWorkspaceFor(g->limits, g->policy.deterministic, hostMessageBytes, &g->fabric, &g->ws);
}

Status allocateRank(Group* g, int r, int device) {
  RankResources& rr = g->ranks[r];
  rr.device = device;
  ARFUSE_CUDA_CHECK(cudaSetDevice(rr.device));
  ARFUSE_CUDA_CHECK(cudaMalloc(&rr.staging, g->ws.stagingBytes));
  ARFUSE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&rr.control), sizeof(ControlBlock)));
  ARFUSE_CUDA_CHECK(cudaMemset(rr.control, 0, sizeof(ControlBlock)));  // epochs 0, no abort, every flag 0
  if (g->ws.llBytes) {
    ARFUSE_CUDA_CHECK(cudaMalloc(&rr.ll, g->ws.llBytes));
    ARFUSE_CUDA_CHECK(cudaMemset(rr.ll, 0, g->ws.llBytes));  // flag 0 never matches a call
    g->peers.ll[r] = rr.ll;
  }
  if (g->ws.ncclBytes && !g->fabric.virtualRanks) ARFUSE_CUDA_CHECK(cudaMalloc(&rr.ncclSum, g->ws.ncclBytes));
  ARFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&rr.aux, cudaStreamNonBlocking));
  g->peers.staging[r] = rr.staging;
  g->peers.control[r] = rr.control;
  ARFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  return Status();
}

size_t hostArenaBytes(int nranks, size_t slotBytes) {
  return static_cast<size_t>(nranks) * (kHostFlagBytes + slotBytes);
}

long long hostMessageBytesFor(const Group& g) { return hostMessageBytes(g.limits, g.ws, g.policy, g.fabric.nccl); }

size_t hostAreaBytesFor(const Group& g, long long messageBytes) {
  return hostArenaBytes(g.nranks, workspaceFor(g.limits, g.fabric, messageBytes, g.policy.deterministic).hostSlotBytes);
}

void layoutHostArena(Group* g, char* devBase, long long messageBytes) {
  sizeWorkspace(g, messageBytes);
  const size_t flagBytes = static_cast<size_t>(g->nranks) * kHostFlagBytes;
  g->hostArenaBytes = hostArenaBytes(g->nranks, g->ws.hostSlotBytes);
  for (int r = 0; r < g->nranks; ++r) {
    g->host.flags[r] = reinterpret_cast<FlagSlot*>(devBase + static_cast<size_t>(r) * kHostFlagBytes);
    g->host.slots[r] = devBase + flagBytes + static_cast<size_t>(r) * g->ws.hostSlotBytes;
  }
  g->fabric.hostStaged = true;
  g->fabric.hostStagedCapacity = messageBytes;
}

}  // namespace arfuse
