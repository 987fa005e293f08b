// The host-staged path's registry entry: without peer access, messages up to the host-staged limit
// (any size the host area holds when NCCL is missing); the one-shot or the two-shot variant by the
// bytes each rank pulls over its link.
#include <algorithm>

#include "algos/shared.h"

namespace arfuse {
namespace {

using planning::kNoHostWhy;
using planning::kNoP2pWhy;
using planning::why;

const char* variant(const PlanContext& c) {
  return planning::hostTwoShot(c.f, c.policy, c.bytes) ? "two-shot" : "one-shot";
}

// Each CTA's tiles in its region of the host slot; the two-shot variant's pushed slots, and its own
// slice's copy in the staging too.
planning::Region region(const PlanContext& c, const Geometry& g) {
  const Fabric& f = c.f;
  if (!planning::hostTwoShot(f, c.policy, c.bytes))
    return planning::Region{ctaRegionUse(g, c.req.tokens), f.hostRegionBytes};
  const long long use = twoShotRegionUse(g, c.req.tokens, f.nranks);
  return planning::Region{
      use, f.stagingRegionBytes > 0 ? std::min(f.hostRegionBytes, f.stagingRegionBytes) : f.hostRegionBytes};
}

Verdict tiles(const PlanContext& c) {
  return planning::tiledGeometry(c, "hoststaged", planning::barrierTiles(c.f), region);
}

Verdict canImplement(const PlanContext& c) {
  const Fabric& f = c.f;
  if (c.forced) {
    if (!f.hostStaged)
      return Verdict::no(strprintf("algo=hoststaged (forced by %s) is unavailable: %s", c.forcedBy,
                                   why(f.hostStagedDetail, kNoHostWhy).c_str()));
    if (c.bytes > f.hostStagedCapacity)
      return Verdict::no(
          strprintf("algo=hoststaged (forced by %s) carries at most %lld B per rank "
                    "(the host exchange area); this call has %lld B (tokens=%d x "
                    "hidden=%d); use auto",
                    c.forcedBy, f.hostStagedCapacity, c.bytes, c.req.tokens, c.req.hidden));
    return Verdict::yes(strprintf("hoststaged (%s variant): forced by %s (%lld B, %d ranks)", variant(c), c.forcedBy,
                                  c.bytes, f.nranks));
  }
  if (f.p2p) return Verdict::no("hoststaged: the group has peer access");
  if (!f.hostStaged) return Verdict::no(why(f.hostStagedDetail, kNoHostWhy));
  if (c.bytes > f.hostStagedCapacity || (c.bytes > c.policy.hostStagedMaxBytes && f.nccl))
    return Verdict::no(strprintf("%lld B > host-staged limit", c.bytes));
  const Verdict fit = tiles(c);
  if (!fit.ok) return fit;
  return Verdict::yes(strprintf("hoststaged (%s variant): no peer access between ranks (%s); %lld B %s", variant(c),
                                why(f.p2pDetail, kNoP2pWhy).c_str(), c.bytes,
                                c.bytes <= c.policy.hostStagedMaxBytes
                                    ? strprintf("<= host-staged limit (%s)", c.origin).c_str()
                                    : "and NCCL is unavailable"));
}

Verdict geometry(const PlanContext& c) {
  Verdict v = tiles(c);
  if (v.ok) v.geometry.variant = planning::hostTwoShot(c.f, c.policy, c.bytes);
  return v;
}

// Messages up to hostMessageBytes: a CTA holds at most ceil(tokens / ctas) whole rows, i.e. at most
// hostMessageBytes / ctas + one row.
void workspace(const WorkspaceInputs& in, Workspace* w) {
  if (in.hostMessageBytes <= 0) return;
  const size_t h = static_cast<size_t>(in.hostMessageBytes);
  const size_t bytes = (h + in.fewest - 1) / in.fewest + w->maxRowBytes;
  // Room for the two-shot variant's pushed slots: n - 1 vectors more per row at most (device/args.h).
  const size_t rows = (bytes + w->maxRowBytes - 1) / std::max<size_t>(1, w->maxRowBytes);
  w->hostRegionBytes = (bytes + rows * static_cast<size_t>(std::max(0, in.nranks - 1)) * 16 + 255) / 256 * 256;
  w->hostSlotBytes = in.ctas * 2 * w->hostRegionBytes;
}

}  // namespace

AlgoEntry hostStagedEntry() {
  return AlgoEntry{arfuseAlgoHostStaged, "hoststaged", "HostStaged", canImplement, geometry, workspace};
}

}  // namespace arfuse
