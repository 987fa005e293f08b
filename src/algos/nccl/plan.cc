// The NCCL path's registry entry: ncclAllReduce (or, deterministic, an all-gather and a rank-order
// sum) and arfuse's own add+RMSNorm as its epilogue. Without peer access it takes what host staging
// does not; with peer access, messages above a measured crossover; forced, any call.
#include "algos/local/plan.h"

#include "algos/shared.h"

namespace arfuse {
namespace {

using planning::kNoHostWhy;
using planning::kNoNcclWhy;
using planning::kNoP2pWhy;
using planning::why;

// A group that spans hosts: ncclAllReduce over every rank (the hierarchical entry, asked before this
// one, said why it does not serve the call); forced, any call.
Verdict acrossHosts(const PlanContext& c) {
  const Fabric& f = c.f;
  const std::string shape = strprintf("%d hosts x %d ranks", f.hosts, f.localRanks);
  if (c.forced)
    return Verdict::yes(strprintf("nccl: forced by %s (%lld B, %s%s)", c.forcedBy, c.bytes, shape.c_str(),
                                  c.policy.deterministic ? ", deterministic: all-gather + rank-order fp32 sum" : ""));
  const std::string declined = c.declined ? *c.declined : "";
  return Verdict::yes(
      strprintf("nccl: %s, %lld B%s%s", shape.c_str(), c.bytes, declined.empty() ? "" : "; ", declined.c_str()));
}

Verdict canImplement(const PlanContext& c) {
  const Fabric& f = c.f;
  if (c.acrossHosts()) return acrossHosts(c);
  if (c.forced) {
    if (!f.nccl)
      return Verdict::no(
          strprintf("algo=nccl (forced by %s) is unavailable: %s", c.forcedBy, why(f.ncclDetail, kNoNcclWhy).c_str()));
    return Verdict::yes(strprintf("nccl: forced by %s (%lld B, %d ranks%s)", c.forcedBy, c.bytes, f.nranks,
                                  c.policy.deterministic ? ", deterministic: all-gather + rank-order fp32 sum" : ""));
  }
  if (!f.nccl) return Verdict::no(why(f.ncclDetail, kNoNcclWhy));
  if (!f.p2p) {  // host staging (the entry before this one) did not take the call
    if (f.hostStaged)
      return Verdict::yes(strprintf("nccl: no peer access between ranks (%s); %lld B > host-staged limit %s (%s)",
                                    why(f.p2pDetail, kNoP2pWhy).c_str(), c.bytes,
                                    planning::limitText(c.policy.hostStagedMaxBytes).c_str(), c.origin));
    return Verdict::yes(strprintf("nccl: no peer access between ranks (%s); host staging unavailable (%s)",
                                  why(f.p2pDetail, kNoP2pWhy).c_str(), why(f.hostStagedDetail, kNoHostWhy).c_str()));
  }
  if (c.policy.ncclAboveBytes >= 0 && c.bytes > c.policy.ncclAboveBytes)
    return Verdict::yes(strprintf("nccl: %lld B > %lld B, above which NCCL measured faster than every arfuse path (%s)",
                                  c.bytes, c.policy.ncclAboveBytes, c.origin));
  return Verdict::no("nccl: the arfuse paths serve this size");
}

// The sum: the largest message, or nranks of them when deterministic (an all-gather); its own
// buffer, never the staging peers may still be reading.
void workspace(const WorkspaceInputs& in, Workspace* w) {
  if (in.nranks > 1)
    w->ncclBytes = static_cast<size_t>(in.deterministic ? in.nranks : 1) * static_cast<size_t>(in.limits.maxTokens) *
                   w->maxRowBytes;
}

}  // namespace

AlgoEntry ncclEntry() {
  AlgoEntry e{arfuseAlgoNccl, "nccl", "Nccl", canImplement, planning::localGeometry, workspace};
  e.acrossHosts = true;
  return e;
}

}  // namespace arfuse
