// The low-latency path's registry entry: the smallest messages, with peer access, whose tiles fit
// the per-CTA regions of the low-latency buffer; above its one-phase limit, where the policy allows
// it, the two-phase variant (Plan.variant; algos/lowlatency/kernel.cuh).
#include <algorithm>

#include "algos/shared.h"

namespace arfuse {
namespace {

// The low-latency kernels' instantiations (algos/lowlatency/launch.h; at most 256 threads): all-reduce
// 1, 2 or 4 vectors per thread, fused 1, 2 or 4, extended 2 or 4.
const VecSets kLlVecs = {{{1, 2, 4, 0}, {1, 2, 4, 0}, {2, 4, 0, 0}}};

// At most kLlMaxCtas CTAs (the buffer's regions), the group's low-latency cap; no wide tiles.
TileRules llTiles(const Fabric& f) {
  const int cap = f.maxBlocksLowLatency < 0 ? f.maxBlocks : f.maxBlocksLowLatency;
  return TileRules{std::min(kLlMaxCtas, cap), false, &kLlVecs, f.llClusterCtas};
}

// Flagged bytes: a narrow tile takes whole 1 KiB groups (device/args.h llTileBytes).
planning::Region region(const PlanContext& c, const Geometry& g) {
  return planning::Region{llRegionUse(g, c.req.tokens), static_cast<long long>(kLlRegionBytes)};
}

Verdict llGeometry(const PlanContext& c) { return planning::tiledGeometry(c, "lowlatency", llTiles(c.f), region); }

// The call's tiles on this path (llGeometry), computed on first use and then reused:
// canImplement asks for them up to three times (the limit, the two-phase window, the variant).
// Whether they fit is a reason for canImplement's answer (data), not an error.
class Tiles {
 public:
  explicit Tiles(const PlanContext& c) : c_(c) {}
  // Fitted with the geometry if they fit the per-CTA regions; else a no saying why.
  const Verdict& fit() {
    if (!done_) fit_ = llGeometry(c_);
    done_ = true;
    return fit_;
  }
  // The geometry (after a fit() that was ok).
  const Plan& plan() const { return fit_.geometry; }

 private:
  const PlanContext& c_;
  bool done_ = false;
  Verdict fit_;
};

// Small enough, and the tiles fit the per-CTA regions; else a no saying why.
Verdict fits(const PlanContext& c, long long llMax, Tiles& tiles) {
  if (c.bytes > llMax) return Verdict::no(strprintf("%lld B > %lld B", c.bytes, llMax));
  return tiles.fit();
}

// The one-phase limit of the auto plan: the buffer's, or a calibration's below it.
long long onePhaseMax(const PlanContext& c, bool* capped) {
  const Fabric& f = c.f;
  *capped = c.policy.lowLatencyMaxBytes >= 0 && c.policy.lowLatencyMaxBytes < f.lowLatencyMaxBytes;
  return *capped ? c.policy.lowLatencyMaxBytes : f.lowLatencyMaxBytes;
}

// Whether the two-phase variant may run this call at all: not for extended calls, not without a
// low-latency buffer, not when the policy turns it off.
bool twoPhaseAllowed(const PlanContext& c) {
  return !c.req.extended && c.policy.llTwoPhase != 0 && c.f.lowLatencyMaxBytes > 0 && c.f.p2p;
}

// The largest message it may take above the one-phase limit (0: none): forced, what its regions can
// hold; in the auto plan, at 3+ ranks, the policy's window (0 by default).
long long twoPhaseCap(const PlanContext& c) {
  if (!twoPhaseAllowed(c)) return 0;
  if (c.forced) return kLlTwoPhaseMaxBytes;
  return c.f.nranks >= 3 ? std::min<long long>(c.policy.llTwoPhaseMaxBytes, kLlTwoPhaseMaxBytes) : 0;
}

// Whether a call the path takes with geometry p runs the two-phase variant: ARFUSE_LL_TWO_PHASE=1,
// or above the one-phase limit; only when every rank owns at least one vector of a tile.
bool twoPhase(const PlanContext& c, const Plan& p, long long onePhaseLimit) {
  if (!twoPhaseAllowed(c) || p.geo.chunkVecs < c.f.nranks) return false;
  return c.policy.llTwoPhase == 1 || c.bytes > onePhaseLimit;
}

// The one-phase limit the variant is chosen against: the buffer's for a forced call, else the auto
// plan's.
long long variantLimit(const PlanContext& c) {
  bool capped = false;
  return c.forced ? c.f.lowLatencyMaxBytes : onePhaseMax(c, &capped);
}

// The two-phase variant for a call above the one-phase limit: its tiles fit, and are wide enough
// (a no outside its window has no reason: the caller's own limit says why).
Verdict twoPhaseFits(const PlanContext& c, long long onePhaseLimit, Tiles& tiles) {
  const long long cap = twoPhaseCap(c);
  if (c.bytes <= onePhaseLimit || c.bytes > cap) return Verdict::no("");
  const Verdict& fit = tiles.fit();
  if (!fit.ok) return fit;
  if (tiles.plan().geo.chunkVecs < c.f.nranks)
    return Verdict::no(strprintf("a tile of %d vectors is too narrow for the two-phase variant at %d ranks",
                                 tiles.plan().geo.chunkVecs, c.f.nranks));
  return fit;
}

// A forced call: within the buffer's limit (two-phase if ARFUSE_LL_TWO_PHASE=1), or above it the
// two-phase variant up to its cap, else the refusal.
Verdict forcedVerdict(const PlanContext& c, Tiles& tiles) {
  const Fabric& f = c.f;
  if (f.p2p && c.bytes > f.lowLatencyMaxBytes) {
    const long long cap = twoPhaseCap(c);
    if (c.bytes <= cap) {
      const Verdict two = twoPhaseFits(c, f.lowLatencyMaxBytes, tiles);
      if (!two.ok)
        return Verdict::no(strprintf("algo=lowlatency (forced by %s) cannot take this call (%s); use auto", c.forcedBy,
                                     two.reason.c_str()));
      return Verdict::yes(
          strprintf("lowlatency (two-phase variant): forced by %s (%lld B, %d ranks)", c.forcedBy, c.bytes, f.nranks));
    }
    return Verdict::no(strprintf(
        "algo=lowlatency (forced by %s) carries at most %lld B per rank%s; "
        "this call has %lld B (tokens=%d x hidden=%d); use auto",
        c.forcedBy, f.lowLatencyMaxBytes, cap > 0 ? strprintf(" (%lld B in its two-phase variant)", cap).c_str() : "",
        c.bytes, c.req.tokens, c.req.hidden));
  }
  if (f.p2p) {
    const Verdict fit = fits(c, f.lowLatencyMaxBytes, tiles);
    if (!fit.ok)
      return Verdict::no(strprintf("algo=lowlatency (forced by %s) cannot take this call (%s); use auto", c.forcedBy,
                                   fit.reason.c_str()));
  }
  Verdict v = planning::forcedPeerPath(c, "lowlatency");
  if (v.ok && tiles.fit().ok && twoPhase(c, tiles.plan(), f.lowLatencyMaxBytes))
    v.reason =
        strprintf("lowlatency (two-phase variant): forced by %s (%lld B, %d ranks)", c.forcedBy, c.bytes, f.nranks);
  return v;
}

// The auto plan: up to the one-phase limit (two-phase if ARFUSE_LL_TWO_PHASE=1), or inside the
// two-phase window above it.
Verdict autoVerdict(const PlanContext& c, Tiles& tiles) {
  const Fabric& f = c.f;
  if (!f.p2p) return planning::noPeerAccess(c);
  bool capped = false;
  const long long llMax = onePhaseMax(c, &capped);
  const Verdict fit = fits(c, llMax, tiles);
  if (!fit.ok) {
    if (twoPhaseFits(c, llMax, tiles).ok)
      return Verdict::yes(strprintf(
          "lowlatency (two-phase variant): %lld B in (%lld, %lld] B at %d ranks: each slice pushed to its owner, "
          "the owner's sum pushed back, 2(n-1)/n of the message each way",
          c.bytes, llMax, twoPhaseCap(c), f.nranks));
    return Verdict::no(fit.reason);
  }
  if (c.policy.llTwoPhase == 1 && tiles.fit().ok && twoPhase(c, tiles.plan(), llMax))
    return Verdict::yes(
        strprintf("lowlatency (two-phase variant, ARFUSE_LL_TWO_PHASE=1): %lld B, %d ranks", c.bytes, f.nranks));
  return Verdict::yes(
      strprintf("lowlatency: %lld B <= %lld B%s: rows pushed with readiness in every word, no separate "
                "barrier",
                c.bytes, llMax, capped ? strprintf(" (%s)", c.origin).c_str() : ""));
}

// A yes carries the geometry its decision computed (every yes has fitted the tiles), with the
// variant, so that makePlan does not compute it again.
Verdict canImplement(const PlanContext& c) {
  Tiles tiles(c);
  Verdict v = c.forced ? forcedVerdict(c, tiles) : autoVerdict(c, tiles);
  if (!v.ok || !tiles.fit().ok) return v;
  Plan g = tiles.plan();
  g.variant = twoPhase(c, g, variantLimit(c));
  return Verdict::yes(std::move(v.reason), g);
}

Verdict geometry(const PlanContext& c) {
  Verdict v = llGeometry(c);
  if (v.ok) v.geometry.variant = twoPhase(c, v.geometry, variantLimit(c));
  return v;
}

// kLlMaxCtas x 2 parities x nranks sources x kLlRegionBytes per rank (none for one rank).
void workspace(const WorkspaceInputs& in, Workspace* w) {
  w->llBytes = in.nranks > 1 ? static_cast<size_t>(kLlMaxCtas) * 2 * in.nranks * kLlRegionBytes : 0;
}

}  // namespace

AlgoEntry lowLatencyEntry() {
  return AlgoEntry{arfuseAlgoLowLatency, "lowlatency", "LowLatency", canImplement, geometry, workspace};
}

}  // namespace arfuse
