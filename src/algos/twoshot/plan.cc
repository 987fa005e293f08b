// The two-shot path's registry entry: with peer access, every message the paths before it left
// (the last entry of the auto plan).
#include "algos/registry.h"

namespace arfuse {
namespace {

Verdict canImplement(const PlanContext& c) {
  const Fabric& f = c.f;
  if (c.forced) {
    const std::string noP2p = planning::needsPeerAccess(c, "twoshot");
    if (!noP2p.empty()) return Verdict::no(noP2p);
    return Verdict::yes(strprintf("twoshot: forced by %s (%lld B, %d ranks)", c.forcedBy, c.bytes, f.nranks));
  }
  if (!f.p2p) return Verdict::no(planning::why(f.p2pDetail, planning::kNoP2pWhy));
  const long long peerBytes = c.bytes * (f.nranks - 1);
  return Verdict::yes(strprintf("twoshot: %lld B x %d peers = %lld B > one-shot limit %s (%s)", c.bytes, f.nranks - 1,
                                peerBytes, planning::limitText(c.policy.oneShotMaxBytes).c_str(), c.origin));
}

bool geometry(const PlanContext& c, Plan* p, std::string* why) {
  return planning::barrierGeometry(c, arfuseAlgoTwoShot, p, why);
}

}  // namespace

AlgoEntry twoShotEntry() {
  AlgoEntry e;
  e.algo = arfuseAlgoTwoShot;
  e.name = "twoshot";
  e.canImplement = canImplement;
  e.geometry = geometry;
  e.workspace = planning::stagingWorkspace;
  return e;
}

}  // namespace arfuse
