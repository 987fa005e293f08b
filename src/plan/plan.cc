#include "plan/plan.h"

#include <algorithm>
#include <climits>

#include "base/status.h"
#include "common/enum_arg.h"
#include "common/log.h"
#include "device/args.h"

namespace arfuse {
namespace {

int roundUp(int x, int m) { return (x + m - 1) / m * m; }

}  // namespace

Plan failedPlan(arfuseResult_t status, std::string reason) {
  Plan p;
  p.status = status;
  p.reason = std::move(reason);
  return p;
}

size_t dtypeSize(arfuseDataType_t dtype) { return dtype == arfuseFloat32 ? 4 : 2; }
int dtypeVecElems(arfuseDataType_t dtype) { return static_cast<int>(16 / dtypeSize(dtype)); }
int maxSupportedHidden(arfuseDataType_t dtype) { return kMaxVecsPerRow * dtypeVecElems(dtype); }

Plan validateShape(const Limits& limits, const PlanRequest& req) {
  const int dtype = rawEnum(req.dtype);  // never loaded as the enum before its range is known
  if (dtype < 0 || dtype >= arfuseNumDataTypes)
    return failedPlan(arfuseInvalidArgument,
                      strprintf("dtype=%d: unknown; use arfuseBfloat16, arfuseFloat16 or arfuseFloat32", dtype));
  if (!(limits.dtypeMask & ARFUSE_DTYPE_BIT(req.dtype)))
    return failedPlan(arfuseInvalidArgument,
                      strprintf("dtype=%s: not enabled in this communicator's config dtypeMask=0x%x; add "
                                "ARFUSE_DTYPE_BIT(%s) when creating it",
                                arfuseDataTypeName(req.dtype), limits.dtypeMask, arfuseDataTypeName(req.dtype)));
  if (req.tokens < 1) return failedPlan(arfuseInvalidArgument, strprintf("tokens=%d: must be >= 1", req.tokens));
  if (req.tokens > limits.maxTokens)
    return failedPlan(arfuseInvalidArgument,
                      strprintf("tokens=%d exceeds this communicator's maxTokens=%d; create it with a larger "
                                "arfuseConfig_t.maxTokens",
                                req.tokens, limits.maxTokens));
  if (req.hidden < 8 || req.hidden % 8 != 0)
    return failedPlan(arfuseInvalidArgument, strprintf("hidden=%d: must be a positive multiple of 8", req.hidden));
  if (req.hidden > maxSupportedHidden(req.dtype))
    return failedPlan(arfuseUnsupported,
                      strprintf("hidden=%d with dtype %s: the largest supported hidden size is %d "
                                "(one row must fit one thread block's registers)",
                                req.hidden, arfuseDataTypeName(req.dtype), maxSupportedHidden(req.dtype)));
  if (req.hidden > limits.maxHidden)
    return failedPlan(arfuseInvalidArgument,
                      strprintf("hidden=%d exceeds this communicator's maxHidden=%d; create it with a larger "
                                "arfuseConfig_t.maxHidden",
                                req.hidden, limits.maxHidden));
  Plan ok;
  return ok;
}

int instantiatedVecs(const VecSets& sets, int kind, int needed) {
  if (kind < 0 || kind > 2) return 0;
  for (int v : sets.byKind[kind])
    if (v >= needed) return v;
  return 0;
}

long long ctaRegionUse(const Geometry& g, int tokens) {
  const long long tiles = (tokens + g.slots - 1) / g.slots;
  return tiles * g.chunkVecs * 16;
}

long long twoShotRegionUse(const Geometry& g, int tokens, int nranks) {
  const long long tiles = (tokens + g.slots - 1) / g.slots;
  return tiles * twoShotTileVecs(g.chunkVecs, nranks) * 16;
}

long long llRegionUse(const Geometry& g, int tokens) {
  const long long tiles = (tokens + g.slots - 1) / g.slots;
  return tiles * static_cast<long long>(llTileBytes(g.chunkVecs));
}

Status setBlockCaps(const std::vector<DeviceResidency>& devices, int configCap, Fabric* f) {
  int narrow = kMaxCtas, ll = kLlMaxCtas, wide = kMaxCtas;
  int clusters[kMaxChunks + 1] = {0, 0, kMaxCtas, 0, kMaxCtas, 0, 0, 0, kMaxCtas};
  int llClusters[kMaxChunks + 1] = {0, 0, kMaxCtas, 0, kMaxCtas, 0, 0, 0, kMaxCtas};
  for (const DeviceResidency& d : devices) {
    const int r = std::max(1, d.ranks);
    narrow = std::min(narrow, d.sms * d.res.narrow / r);
    ll = std::min(ll, d.sms * d.res.lowLatency / r);
    wide = std::min(wide, d.sms * d.res.wide / r);
    for (int c = 2; c <= kMaxChunks; c *= 2) {
      clusters[c] = std::min(clusters[c], d.res.clusters[c] / r * c);
      llClusters[c] = std::min(llClusters[c], d.res.llClusters[c] / r * c);
    }
  }
  if (configCap > 0) {
    narrow = std::min(narrow, configCap);
    ll = std::min(ll, configCap);
    wide = std::min(wide, configCap);
    for (int c = 2; c <= kMaxChunks; c *= 2) {
      clusters[c] = std::min(clusters[c], configCap);
      llClusters[c] = std::min(llClusters[c], configCap);
    }
  }
  if (narrow < 1 || ll < 1 || wide < 1)
    return ARFUSE_FAIL(arfuseUnsupported,
                       "too many ranks share one GPU for one CTA of each to be resident at once (per rank: %d narrow, "
                       "%d low-latency, %d wide CTAs); use fewer virtual ranks",
                       narrow, ll, wide);
  f->maxBlocks = narrow;
  f->maxBlocksLowLatency = ll;
  f->maxBlocksWide = wide;
  for (int c = 2; c <= kMaxChunks; c *= 2) {
    f->clusterCtas[c] = clusters[c];
    f->llClusterCtas[c] = llClusters[c];
  }
  return Status();
}

SplitRule splitRuleOf(const PlanPolicy& p) {
  SplitRule s;
  s.maxChunks = p.maxChunks;
  s.maxChunkVecs = std::max(kGroupVecs, p.splitVecs);
  s.sharedCtas = p.splitShared;
  s.rowPush = p.rowPush;
  s.wideTwo = p.wideTwo;
  return s;
}

bool tileGeometry(const Fabric& f, const PlanRequest& r, const TileRules& rules, int* blocks, int* threads,
                  Geometry* geo, const SplitRule& split) {
  const int nvec = r.hidden / dtypeVecElems(r.dtype);
  const int maxCtas = std::max(1, rules.maxCtas);
  const auto clusterCap = [&](int c) { return rules.clusterCtas ? rules.clusterCtas[c] : -1; };  // -1: none
  // Split a row over a cluster while its chunk is large (> split.maxChunkVecs vectors: 256 = 4 KiB),
  // the chunks stay whole groups of the canonical row reduction, every row still gets its own CTAs,
  // and that many CTAs in clusters fit the GPU at once. Wide tiles (> 512 vectors) are never split.
  // split.sharedCtas: where that leaves rows whole, split them anyway over the clusters that fit,
  // several rows per cluster.
  const auto chunksFor = [&](long long rowsOwningCtas) {
    int c = 1;
    while (f.clusters && !r.extended && c < std::min(kMaxChunks, split.maxChunks) && nvec / c > split.maxChunkVecs &&
           nvec % (kGroupVecs * 2 * c) == 0 &&
           rowsOwningCtas * 2 * c <= std::min(maxCtas, clusterCap(2 * c) < 0 ? maxCtas : clusterCap(2 * c)))
      c *= 2;
    return nvec / c > 512 ? 1 : c;
  };
  int c = chunksFor(r.tokens);
  const bool shared = split.sharedCtas && c == 1;
  if (shared) c = chunksFor(1);
  const int wideCtas = f.maxBlocksWide < 0 ? maxCtas : std::max(1, std::min(maxCtas, f.maxBlocksWide));
  const auto ctasFor = [&](int chunks) {  // CTAs the call may use with rows cut into `chunks`
    int n = rules.wideTiles && nvec / chunks > 512 ? wideCtas : maxCtas;
    if (chunks > 1 && clusterCap(chunks) >= 0) n = std::min(n, clusterCap(chunks));
    return n;
  };
  const auto perCta = [&](int chunks) {  // vectors one CTA carries (its region holds these)
    const long long slots = std::max(1, std::min(r.tokens, ctasFor(chunks) / chunks));
    return (r.tokens + slots - 1) / slots * (nvec / chunks);
  };
  // Rows sharing clusters never carry more per CTA than whole rows would (the regions are sized so).
  if (shared && c > 1 && perCta(c) > perCta(1)) c = 1;
  geo->chunks = c;
  geo->chunkVecs = nvec / c;
  geo->slots = std::max(1, std::min(r.tokens, ctasFor(c) / c));
  *blocks = geo->slots * c;
  const int kind = r.extended ? 2 : r.op == arfuseOpAllReduce ? 0 : 1;
  // Tiles up to 512 vectors (every tile without wideTiles) on up to 256 threads, with the path's
  // instantiations; larger ones on 512 threads with its wide ones (device/exchange.cuh
  // barrierMaxThreads): the smallest that covers the tile; 8 vectors where the path lists none or
  // split.wideTwo is off (the wide lists add only the 2-vector kernels to the 8-vector ones).
  const bool small = !rules.wideTiles || geo->chunkVecs <= 512;
  *threads = std::min(small ? 256 : kMaxThreads, std::max(32, roundUp(geo->chunkVecs, 32)));
  const int needed = (geo->chunkVecs + *threads - 1) / *threads;
  const VecSets* wide = split.wideTwo ? rules.wideVecs : nullptr;
  geo->vecs = small         ? instantiatedVecs(*rules.vecs, kind, needed)
              : wide        ? instantiatedVecs(*wide, kind, needed)
              : needed <= 8 ? 8
                            : 0;
  // Split rows (tiles of at most 512 vectors: 1 or 2 per thread, which every path's row-push kernels
  // cover) of plain add+RMSNorm calls; whole rows reduce inside their CTA and never need it.
  geo->rowPush = split.rowPush && kind == 1 && c > 1;
  return geo->vecs > 0;
}

}  // namespace arfuse
