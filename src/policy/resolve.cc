#include "policy/resolve.h"

#include <algorithm>
#include <set>

#include "base/status.h"
#include "common/params.h"
#include "plan/calibration.h"
#include "plan/from_topology.h"

namespace arfuse {

ExplicitLimits explicitLimitsFromEnv() {
  ExplicitLimits e;
  for (const ParamValue& v : paramValues()) {
    if (!v.fromEnvironment) continue;
    const std::string name = v.spec->name;
    e.oneShot |= name == "ARFUSE_ONESHOT_MAX_BYTES";
    e.hostOneShot |= name == "ARFUSE_HOST_ONESHOT_MAX_BYTES";
    e.hostStaged |= name == "ARFUSE_HOST_STAGED_MAX_BYTES";
  }
  return e;
}

std::vector<int> topologyIndices(const topo::Topology& t, const std::vector<std::string>& uuids) {
  std::vector<int> out;
  for (const std::string& u : uuids) {
    int at = -1;
    for (int d = 0; d < t.size() && at < 0; ++d)
      if (!u.empty() && t.gpus[d].uuid == u) at = d;
    out.push_back(at);
  }
  return out;
}

namespace {

int distinctGpus(const std::vector<std::string>& uuids) {
  return static_cast<int>(std::set<std::string>(uuids.begin(), uuids.end()).size());
}

// The topology indices of every rank's GPU; a failure without a topology, or naming the first GPU
// `t` lacks. Neither stops the group: the policy keeps its defaults and says why in a note.
Status groupIndices(const PolicyInputs& in, std::vector<int>* indices) {
  if (!in.topology)
    return ARFUSE_FAIL(arfuseUnsupported, "%s", in.topologyError.empty() ? "no topology" : in.topologyError.c_str());
  *indices = topologyIndices(*in.topology, in.uuids);
  for (size_t r = 0; r < indices->size(); ++r)
    if ((*indices)[r] < 0)
      return ARFUSE_FAIL(arfuseUnsupported,
                         "rank %zu's GPU %s is not among the %d GPUs this process sees (CUDA_VISIBLE_DEVICES?)", r,
                         in.uuids[r].c_str(), in.topology->size());
  return Status();
}

// Step 2: a matching calibration replaces the built-in limits.
void applyCalibrationFile(const PolicyInputs& in, ResolvedPolicy* out) {
  const int nranks = static_cast<int>(in.uuids.size());
  if (in.calibrationFile.empty()) return;
  if (nranks < 2) {
    out->calibrationWhy = "one rank: there are no crossovers to apply";
    return;
  }
  std::vector<int> indices;
  const Status found = groupIndices(in, &indices);
  if (!found.ok()) {
    out->calibrationWhy = found.message();
    out->notes.push_back({kLogWarn, "ARFUSE_CALIBRATION_FILE=" + in.calibrationFile + " not used: " + found.message()});
    return;
  }
  std::string summary;
  const std::string fingerprint = topo::calibrationFingerprint(*in.topology, indices);
  const Status applied =
      loadCalibrationPolicy(in.calibrationFile, in.uuids, fingerprint, nranks, &out->policy, &summary);
  out->calibrationApplies = applied.ok();
  out->calibrationWhy = applied.ok() ? summary : applied.message();
  out->notes.push_back({applied.ok() ? kLogInfo : kLogWarn, out->calibrationWhy});
}

// Step 3: without a calibration and without an explicit ARFUSE_ONESHOT_MAX_BYTES, built-in limits
// that depend on the fabric follow it.
void applyFabricDefaultsTo(const PolicyInputs& in, ResolvedPolicy* out) {
  if (in.uuids.size() < 2 || !out->policy.calibratedFrom.empty() || in.explicitEnv.oneShot) return;
  const int distinct = distinctGpus(in.uuids);
  if (distinct == 1) {
    // Every rank on one GPU (virtual ranks, or processes sharing it): a peer's rows are local
    // memory, so one-shot's (n - 1) reads cost HBM bandwidth, not link bandwidth (one H200,
    // 2026-12-01 proxy runs: one-shot beat two-shot up to 2.75 MB of peer reads at 4 ranks and lost
    // at 6.4 MB at 8).
    out->policy.oneShotMaxBytes = kOneShotMaxBytesOneGpu;
    out->policy.builtinOrigin = "built-in one-GPU default, not calibrated";
    return;
  }
  std::vector<int> indices;
  if (!groupIndices(in, &indices).ok()) return;  // the general defaults stay
  if (applyFabricDefaults(*in.topology, indices, &out->policy))
    out->notes.push_back({kLogInfo, strprintf("every pair of the group's GPUs is joined by NVLink: one-shot limit "
                                              "%lld B (%s)",
                                              out->policy.oneShotMaxBytes, out->policy.builtinOrigin.c_str())});
}

}  // namespace

ResolvedPolicy resolvePolicy(const PolicyInputs& in) {
  ResolvedPolicy out;
  out.policy = in.configured;
  applyCalibrationFile(in, &out);
  applyFabricDefaultsTo(in, &out);
  // Step 4: an explicit environment limit wins over the calibration (the fabric defaults already
  // stood back for ARFUSE_ONESHOT_MAX_BYTES).
  if (in.explicitEnv.oneShot) out.policy.oneShotMaxBytes = in.configured.oneShotMaxBytes;
  if (in.explicitEnv.hostOneShot) out.policy.hostOneShotMaxBytes = in.configured.hostOneShotMaxBytes;
  if (in.explicitEnv.hostStaged) out.policy.hostStagedMaxBytes = in.configured.hostStagedMaxBytes;
  return out;
}

bool policyNeedsTopology(const PolicyInputs& in) {
  if (in.uuids.size() < 2) return false;
  if (!in.calibrationFile.empty()) return true;
  return !in.explicitEnv.oneShot && distinctGpus(in.uuids) >= 2;
}

bool sameLimits(const PlanPolicy& a, const PlanPolicy& b) {
  return a.oneShotMaxBytes == b.oneShotMaxBytes && a.hostOneShotMaxBytes == b.hostOneShotMaxBytes &&
         a.hostStagedMaxBytes == b.hostStagedMaxBytes && a.lowLatencyMaxBytes == b.lowLatencyMaxBytes &&
         a.ncclAboveBytes == b.ncclAboveBytes && a.llTwoPhase == b.llTwoPhase &&
         a.llTwoPhaseMaxBytes == b.llTwoPhaseMaxBytes;
}

std::string limitsText(const PlanPolicy& p) {
  return strprintf("oneshot<=%lld hostoneshot<=%lld hoststaged<=%lld lowlatency<=%lld nccl>%lld ll2phase=%d<=%lld",
                   p.oneShotMaxBytes, p.hostOneShotMaxBytes, p.hostStagedMaxBytes, p.lowLatencyMaxBytes,
                   p.ncclAboveBytes, p.llTwoPhase, p.llTwoPhaseMaxBytes);
}

}  // namespace arfuse
