// The two-shot path's registry entry: with peer access, every message the paths before it left
// (the last entry of the auto plan).
#include "algos/shared.h"

namespace arfuse {
namespace {

Verdict canImplement(const PlanContext& c) {
  const Fabric& f = c.f;
  if (c.forced) return planning::forcedPeerPath(c, "twoshot");
  if (!f.p2p) return planning::noPeerAccess(c);
  const long long peerBytes = c.bytes * (f.nranks - 1);
  return Verdict::yes(strprintf("twoshot: %lld B x %d peers = %lld B > one-shot limit %s (%s)", c.bytes, f.nranks - 1,
                                peerBytes, planning::limitText(c.policy.oneShotMaxBytes).c_str(), c.origin));
}

// Each CTA's tiles in its staging region, n - 1 pushed slots of a slice's width each (device/args.h
// twoShotTileVecs).
planning::Region region(const PlanContext& c, const Geometry& g) {
  return planning::Region{twoShotRegionUse(g, c.req.tokens, c.f.nranks), c.f.stagingRegionBytes};
}

Verdict geometry(const PlanContext& c) {
  return planning::tiledGeometry(c, "twoshot", planning::barrierTiles(c.f), region);
}

}  // namespace

AlgoEntry twoShotEntry() {
  return AlgoEntry{arfuseAlgoTwoShot, "twoshot", "TwoShot", canImplement, geometry, planning::stagingWorkspace};
}

}  // namespace arfuse
