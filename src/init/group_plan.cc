#include "init/group_plan.h"

#include <algorithm>
#include <set>

#include "algos/registry.h"
#include "common/log.h"

namespace arfuse {

PolicyInputs policyInputsFor(const GroupFacts& facts) {
  PolicyInputs in;
  in.configured = facts.config.policy;
  in.explicitEnv = facts.explicitEnv;
  for (const RankFacts& r : facts.ranks) in.uuids.push_back(r.uuid);
  in.topology = facts.topology;
  in.topologyError = facts.topologyError;
  in.calibrationFile = facts.calibrationFile;
  return in;
}

bool groupNeedsTopology(const GroupFacts& facts) { return policyNeedsTopology(policyInputsFor(facts)); }

void sizeWorkspaceFor(const Limits& limits, bool deterministic, long long hostMessageBytes, Fabric* f, Workspace* ws) {
  *ws = workspaceFor(limits, *f, hostMessageBytes, deterministic);
  f->stagingRegionBytes = static_cast<long long>(ws->stagingRegionBytes);
  f->hostRegionBytes = static_cast<long long>(ws->hostRegionBytes);
  const long long message = static_cast<long long>(limits.maxTokens) * static_cast<long long>(ws->maxRowBytes);
  f->lowLatencyMaxBytes = f->nranks > 1 ? std::min<long long>(kLowLatencyMaxBytes, message) : 0;
}

long long hostMessageBytes(const Limits& limits, const Workspace& ws, const PlanPolicy& policy, bool ncclAvailable) {
  long long m = static_cast<long long>(limits.maxTokens) * static_cast<long long>(ws.maxRowBytes);
  if (ncclAvailable && policy.forcedAlgo != arfuseAlgoHostStaged)
    m = std::min<long long>(m, std::max<long long>(policy.hostStagedMaxBytes, 16));
  return (m + 255) / 256 * 256;
}

bool needsHostArea(int nranks, const Fabric& f, const PlanPolicy& policy, std::string* detail) {
  if (nranks > 1 && (!f.p2p || policy.forcedAlgo == arfuseAlgoHostStaged)) return true;
  *detail = nranks == 1 ? "a single rank needs no exchange"
                        : "peer access works, so no host exchange area is allocated (force algo=hoststaged to get one)";
  return false;
}

std::string forcedPathUnavailable(const PlanPolicy& policy, const Fabric& f, ForcedCheck which) {
  const int a = policy.forcedAlgo;
  switch (which) {
    case ForcedCheck::kPeerAccess:
      if ((a == arfuseAlgoOneShot || a == arfuseAlgoTwoShot || a == arfuseAlgoLowLatency) && !f.p2p)
        return strprintf("config: algo=%s (forced by %s) needs peer access: %s", arfuseAlgoName(arfuseAlgo_t(a)),
                         policy.forcedBy.c_str(), f.p2pDetail.c_str());
      return "";
    case ForcedCheck::kNccl:
      if (a == arfuseAlgoNccl && !f.nccl)
        return strprintf("config: algo=nccl (forced by %s) is unavailable: %s", policy.forcedBy.c_str(),
                         f.ncclDetail.c_str());
      return "";
    case ForcedCheck::kHostStaged:
      if (a == arfuseAlgoHostStaged && !f.hostStaged)
        return strprintf("config: algo=hoststaged (forced by %s) is unavailable: %s", policy.forcedBy.c_str(),
                         f.hostStagedDetail.c_str());
      return "";
  }
  return "";
}

GroupPlan planGroup(const GroupFacts& facts) {
  GroupPlan p;
  const int nranks = static_cast<int>(facts.ranks.size());
  Fabric& f = p.fabric;
  f.nranks = nranks;
  p.limits = facts.config.limits;
  p.timeoutNs = static_cast<uint64_t>(facts.config.timeoutMs) * 1000000ull;

  // Co-residency: every rank's CTAs on a GPU must fit at once, or per-CTA barriers between ranks
  // sharing it could wait on CTAs that never get scheduled. One entry per distinct GPU.
  std::vector<DeviceResidency> residency;
  std::set<std::string> seen;
  int smCount = 1 << 30, minArch = 1 << 30;
  for (const RankFacts& r : facts.ranks) {
    smCount = std::min(smCount, r.sms);
    minArch = std::min(minArch, r.arch);
    if (!seen.insert(r.uuid).second) continue;
    DeviceResidency dr;
    dr.sms = r.sms;
    dr.ranks = static_cast<int>(
        std::count_if(facts.ranks.begin(), facts.ranks.end(), [&](const RankFacts& o) { return o.uuid == r.uuid; }));
    dr.res = r.res;
    residency.push_back(dr);
  }
  f.virtualRanks = static_cast<int>(seen.size()) < nranks;
  if (const Status caps = setBlockCaps(residency, facts.config.maxBlocks, &f); !caps.ok()) {
    p.status = caps.into(&p.error);
    return p;
  }
  f.smCount = smCount;
  f.clusters = minArch >= 90;
  f.pdl = f.clusters && facts.pdl;

  const ResolvedPolicy rp = resolvePolicy(policyInputsFor(facts));
  p.policy = rp.policy;
  p.notes = rp.notes;
  sizeWorkspaceFor(p.limits, p.policy.deterministic, 0, &f, &p.ws);

  p.ncclPlanned = nranks > 1 && !f.virtualRanks;
  if (!p.ncclPlanned)
    f.ncclDetail = nranks == 1 ? "a single rank needs no NCCL"
                               : "NCCL needs one device per rank; this group has virtual ranks (a device repeats)";
  return p;
}

Status proofVerdict(ProofOutcome outcome, const std::string& why, Fabric* f) {
  if (outcome == kProofOk) return Status();
  if (outcome == kProofWrongData) {
    f->p2p = false;
    f->p2pDetail = why;
    return Status();
  }
  return ARFUSE_FAIL(arfuseCudaError,
                     "init: %s. The group fails rather than fall back to host staging: a CUDA error through a peer "
                     "mapping can leave this process's CUDA context unusable, and a mapping that opens but fails "
                     "when used is a deployment fault (processes in containers that do not share the IPC namespace "
                     "or the GPUs, a driver refusing it): check `nvidia-smi topo -m` and run the ranks' containers "
                     "with --ipc=host",
                     why.c_str());
}

}  // namespace arfuse
