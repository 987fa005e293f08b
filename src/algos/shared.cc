#include "algos/shared.h"

#include <algorithm>
#include <climits>

#include "common/log.h"
#include "device/args.h"

namespace arfuse {

namespace planning {

const char* const kNoP2pWhy = "the group reported no peer access";
const char* const kNoNcclWhy = "the group has no NCCL communicator";
const char* const kNoHostWhy = "the group has no host exchange area";

std::string why(const std::string& detail, const char* fallback) { return detail.empty() ? fallback : detail; }

std::string limitText(long long v) { return v == LLONG_MAX ? std::string("unlimited") : strprintf("%lld B", v); }

bool hostTwoShot(const Fabric& f, const PlanPolicy& policy, long long bytes) {
  const long long peerBytes = bytes * (f.nranks - 1);
  return f.nranks > 2 && peerBytes > policy.hostOneShotMaxBytes;
}

std::string needsPeerAccess(const PlanContext& c, const char* name) {
  if (c.f.p2p) return "";
  return strprintf("algo=%s (forced by %s) needs peer access between all ranks: %s; use algo=nccl or auto", name,
                   c.forcedBy, why(c.f.p2pDetail, kNoP2pWhy).c_str());
}

Verdict forcedPeerPath(const PlanContext& c, const char* name) {
  const std::string refusal = needsPeerAccess(c, name);
  if (!refusal.empty()) return Verdict::no(refusal);
  return Verdict::yes(strprintf("%s: forced by %s (%lld B, %d ranks)", name, c.forcedBy, c.bytes, c.f.nranks));
}

Verdict noPeerAccess(const PlanContext& c) { return Verdict::no(why(c.f.p2pDetail, kNoP2pWhy)); }

// The barrier kernels' instantiations (algos/barrier_launch.cuh): all-reduce 1 or 8 vectors per thread,
// fused 1, 2 or 8, extended 2 or 8 (1 and 2: at most 256 threads); on 512 threads (wide tiles) fused 2
// or 8, the others 8.
const VecSets kBarrierVecs = {{{1, 8, 0, 0}, {1, 2, 8, 0}, {2, 8, 0, 0}}};
const VecSets kBarrierWideVecs = {{{8, 0, 0, 0}, {2, 8, 0, 0}, {8, 0, 0, 0}}};

TileRules barrierTiles(const Fabric& f) {
  return TileRules{std::min(kMaxCtas, f.maxBlocks), true, &kBarrierVecs, f.clusterCtas, &kBarrierWideVecs};
}

// A no is a reason (the caller decides whether it is a refusal, a decline or a fallback).
Verdict tiledGeometry(const PlanContext& c, const char* name, const TileRules& rules, RegionOf region) {
  const Fabric& f = c.f;
  Plan p;
  if (!tileGeometry(f, c.req, rules, &p.blocks, &p.threads, &p.geo, splitRuleOf(c.policy)))
    return Verdict::no(strprintf("no %s kernel covers %d vectors per CTA", name, p.geo.chunkVecs));
  const Region r = region(c, p.geo);
  if (r.cap > 0 && r.use > r.cap)
    return Verdict::no(strprintf("%s: a CTA would carry %lld B (%d tiles of %d vectors), more than its %lld B region",
                                 name, r.use, (c.req.tokens + p.geo.slots - 1) / p.geo.slots, p.geo.chunkVecs, r.cap));
  p.pdl = f.pdl;
  return Verdict::fitted(p);
}

void stagingWorkspace(const WorkspaceInputs& in, Workspace* w) {
  // A CTA holds ceil(tokens / slots) tiles of at most one row (slots = min(tokens, CTAs of its class)).
  // Each row has room for two-shot's pushed slots (device/args.h twoShotTileVecs: n - 1 vectors more
  // at most, only for rows narrower than (n - 1)^2 vectors).
  const size_t rowsPerCta = (static_cast<size_t>(in.limits.maxTokens) + in.fewest - 1) / in.fewest;
  const size_t slack = static_cast<size_t>(std::max(0, in.nranks - 1)) * 16;
  w->stagingRegionBytes = (rowsPerCta * (w->maxRowBytes + slack) + 255) / 256 * 256;
  w->stagingBytes = in.ctas * 2 * w->stagingRegionBytes;
}

}  // namespace planning

}  // namespace arfuse
