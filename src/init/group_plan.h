// Every decision of group creation that does not touch memory, made once for both init paths:
// an in-process group (arfuseCommInitAll: one process drives every rank) and a multi-process group
// (arfuseCommInitRank*: one rank per process, facts exchanged at phase A). Both describe the group
// the same way -- per rank its GPU's UUID, architecture, SMs and measured residency -- and get the
// same plan inputs (Fabric, Limits, PlanPolicy) and workspace sizes back. Pure; CPU-tested
// (tests/cpu/policy_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "base/status.h"
#include "device/args.h"
#include "plan/plan.h"
#include "policy/config.h"
#include "policy/resolve.h"

namespace arfuse {

struct RankFacts {
  std::string uuid;  // "GPU-..." of the rank's GPU (ranks sharing a GPU repeat it)
  int arch = 0;      // 90 for sm_90
  int sms = 0;
  KernelResidency res;  // what its GPU keeps resident of each kernel class (algos/launch.h measureResidency)
};

struct GroupFacts {
  bool multiProcess = false;  // only for the words of the log lines: the decisions do not depend on it
  ResolvedConfig config;      // resolveConfig (config struct > environment > default)
  std::vector<RankFacts> ranks;
  bool pdl = true;  // ARFUSE_PDL
  ExplicitLimits explicitEnv;
  std::string calibrationFile;
  const topo::Topology* topology = nullptr;  // reported facts of the GPUs this process sees (policyNeedsTopology)
  std::string topologyError;
};

struct GroupPlan {
  arfuseResult_t status = arfuseSuccess;  // arfuseUnsupported when the kernels cannot be co-resident
  std::string error;
  Fabric fabric;  // everything but what the transports find (p2p, nccl, hostStaged)
  Limits limits;
  PlanPolicy policy;  // resolvePolicy
  Workspace ws;       // staging and low-latency sizes; the host part once the host area is decided
  uint64_t timeoutNs = 0;
  bool ncclPlanned = false;  // every rank has its own GPU: NCCL is tried (fabric.ncclDetail says why not)
  std::vector<PolicyNote> notes;
};

// The policy inputs of a group described by `facts` (what resolvePolicy is given).
PolicyInputs policyInputsFor(const GroupFacts& facts);
// Whether planGroup will look at facts.topology (the caller probes only then).
bool groupNeedsTopology(const GroupFacts& facts);

GroupPlan planGroup(const GroupFacts& facts);

// Sizes *ws from the limits and the fabric's CTA caps (the host part from hostMessageBytes, 0 before
// the host area is decided) and tells the fabric the per-CTA region sizes the plan checks.
void sizeWorkspaceFor(const Limits& limits, bool deterministic, long long hostMessageBytes, Fabric* f, Workspace* ws);

// Largest message (bytes per rank, rounded up to 256) a host exchange area of this group carries:
// the largest message, or only up to the host-staged limit when NCCL takes the larger ones.
long long hostMessageBytes(const Limits& limits, const Workspace& ws, const PlanPolicy& policy, bool ncclAvailable);

// Whether the group needs a host exchange area (peers cannot reach each other, or it is forced);
// when not, *detail says why there is none (fabric.hostStagedDetail).
bool needsHostArea(int nranks, const Fabric& f, const PlanPolicy& policy, std::string* detail);

// A forced algorithm the group cannot run, once the transports are known: "" when there is none,
// else the message init fails with (arfuseUnsupported).
enum class ForcedCheck { kPeerAccess, kNccl, kHostStaged };
std::string forcedPathUnavailable(const PlanPolicy& policy, const Fabric& f, ForcedCheck which);

// What a failed proof of peer access does to the group (the policy of issue 37 item 8d, from the
// design rule "fail closed, loudly, once"):
//   - kProofWrongData: the mapping works but data did not land or read back wrong (ACS, an IOMMU):
//     a property of the fabric, like peer access not being offered at all. The peer paths are
//     disabled with one WARN line naming the pair and the group works on host staging or NCCL.
//   - kProofCudaError: a CUDA error while storing through or checking a mapping that opened. The
//     process's CUDA context may be unusable (a fault through a mapping is sticky), so a fallback
//     would run on a context that fails its next call -- or hide a deployment fault (containers that
//     do not share the IPC namespace or the GPUs, a driver that refuses the mapping) behind a path
//     several times slower that nobody asked for. The group fails at init, every rank with the same
//     sentence. (A mapping that does not open at all already failed the group: mapPeers.)
// Returns the Status init returns; sets f->p2p / p2pDetail for kProofWrongData.
enum ProofOutcome { kProofOk = 0, kProofWrongData, kProofCudaError };
Status proofVerdict(ProofOutcome outcome, const std::string& why, Fabric* f);

}  // namespace arfuse
