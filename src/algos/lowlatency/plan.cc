// The low-latency path's registry entry: the smallest messages, with peer access, whose tiles fit
// the per-CTA regions of the low-latency buffer.
#include "algos/registry.h"

namespace arfuse {
namespace {

// Small enough, and the tiles fit the per-CTA regions.
bool fits(const PlanContext& c, long long llMax, std::string* why) {
  if (c.bytes > llMax) {
    *why = strprintf("%lld B > %lld B", c.bytes, llMax);
    return false;
  }
  Plan probe;
  return planning::barrierGeometry(c, arfuseAlgoLowLatency, &probe, why);
}

Verdict canImplement(const PlanContext& c) {
  const Fabric& f = c.f;
  std::string why;
  if (c.forced) {
    if (f.p2p && c.bytes > f.lowLatencyMaxBytes)
      return Verdict::no(
          strprintf("algo=lowlatency (forced by %s) carries at most %lld B per rank; "
                    "this call has %lld B (tokens=%d x hidden=%d); use auto",
                    c.forcedBy, f.lowLatencyMaxBytes, c.bytes, c.req.tokens, c.req.hidden));
    if (f.p2p && !fits(c, f.lowLatencyMaxBytes, &why))
      return Verdict::no(
          strprintf("algo=lowlatency (forced by %s) cannot take this call (%s); use auto", c.forcedBy, why.c_str()));
    return planning::forcedPeerPath(c, "lowlatency");
  }
  if (!f.p2p) return planning::noPeerAccess(c);
  const bool capped = c.policy.lowLatencyMaxBytes >= 0 && c.policy.lowLatencyMaxBytes < f.lowLatencyMaxBytes;
  const long long llMax = capped ? c.policy.lowLatencyMaxBytes : f.lowLatencyMaxBytes;
  if (!fits(c, llMax, &why)) return Verdict::no(why);
  return Verdict::yes(
      strprintf("lowlatency: %lld B <= %lld B%s: rows pushed with readiness in every word, no separate "
                "barrier",
                c.bytes, llMax, capped ? strprintf(" (%s)", c.origin).c_str() : ""));
}

// kLlMaxCtas x 2 parities x nranks sources x kLlRegionBytes per rank (none for one rank).
void workspace(const WorkspaceInputs& in, Workspace* w) {
  w->llBytes = in.nranks > 1 ? static_cast<size_t>(kLlMaxCtas) * 2 * in.nranks * kLlRegionBytes : 0;
}

}  // namespace

AlgoEntry lowLatencyEntry() {
  return AlgoEntry{arfuseAlgoLowLatency, "lowlatency", canImplement, planning::barrierGeometryOf<arfuseAlgoLowLatency>,
                   workspace};
}

}  // namespace arfuse
