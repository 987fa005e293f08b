// The one-shot path's registry entry: with peer access, every message at 2 ranks (two-shot moves
// the same bytes and adds a barrier) and, beyond, while bytes x (n-1) stays under the one-shot limit.
#include "algos/shared.h"

namespace arfuse {
namespace {

Verdict canImplement(const PlanContext& c) {
  const Fabric& f = c.f;
  if (c.forced) return planning::forcedPeerPath(c, "oneshot");
  if (!f.p2p) return planning::noPeerAccess(c);
  // One-shot reads (n-1) x bytes from peers with one barrier; two-shot reads 2(n-1)/n x bytes with
  // two. At 2 ranks both read the same bytes, so one-shot always wins (measured on 2 x H200 NVLink:
  // 13.4 vs 16.5 us at 128 tokens, 119 vs 137 us at 2048); beyond, two-shot once bytes dominate.
  // A calibration replaces the 2-rank rule and the limits with what was measured on this machine.
  if (f.nranks == 2 && !c.calibrated)
    return Verdict::yes(
        strprintf("oneshot: 2 ranks, where two-shot moves the same %lld B per rank and adds a barrier", c.bytes));
  const long long peerBytes = c.bytes * (f.nranks - 1);
  const std::string limit = planning::limitText(c.policy.oneShotMaxBytes);
  if (peerBytes > c.policy.oneShotMaxBytes)
    return Verdict::no(strprintf("%lld B > one-shot limit %s", peerBytes, limit.c_str()));
  return Verdict::yes(strprintf("oneshot: %lld B x %d peers = %lld B <= one-shot limit %s (%s)", c.bytes, f.nranks - 1,
                                peerBytes, limit.c_str(), c.origin));
}

// Each CTA's tiles, copied in, in its staging region.
planning::Region region(const PlanContext& c, const Geometry& g) {
  return planning::Region{ctaRegionUse(g, c.req.tokens), c.f.stagingRegionBytes};
}

Verdict geometry(const PlanContext& c) {
  return planning::tiledGeometry(c, "oneshot", planning::barrierTiles(c.f), region);
}

}  // namespace

AlgoEntry oneShotEntry() {
  return AlgoEntry{arfuseAlgoOneShot, "oneshot", "OneShot", canImplement, geometry, planning::stagingWorkspace};
}

}  // namespace arfuse
