#include "plan/plan.h"

#include <algorithm>
#include <climits>

#include "algos/registry.h"
#include "common/enum_arg.h"
#include "common/log.h"
#include "device/args.h"

namespace arfuse {
namespace {

int roundUp(int x, int m) { return (x + m - 1) / m * m; }

Plan failure(arfuseResult_t status, std::string msg) {
  Plan p;
  p.status = status;
  p.reason = std::move(msg);
  return p;
}

}  // namespace

size_t dtypeSize(arfuseDataType_t dtype) { return dtype == arfuseFloat32 ? 4 : 2; }
int dtypeVecElems(arfuseDataType_t dtype) { return static_cast<int>(16 / dtypeSize(dtype)); }
int maxSupportedHidden(arfuseDataType_t dtype) { return kMaxVecsPerRow * dtypeVecElems(dtype); }

Plan validateShape(const Limits& limits, const PlanRequest& req) {
  const int dtype = rawEnum(req.dtype);  // never loaded as the enum before its range is known
  if (dtype < 0 || dtype >= arfuseNumDataTypes)
    return failure(arfuseInvalidArgument,
                   strprintf("dtype=%d: unknown; use arfuseBfloat16, arfuseFloat16 or arfuseFloat32", dtype));
  if (!(limits.dtypeMask & ARFUSE_DTYPE_BIT(req.dtype)))
    return failure(arfuseInvalidArgument,
                   strprintf("dtype=%s: not enabled in this communicator's config dtypeMask=0x%x; add "
                             "ARFUSE_DTYPE_BIT(%s) when creating it",
                             arfuseDataTypeName(req.dtype), limits.dtypeMask, arfuseDataTypeName(req.dtype)));
  if (req.tokens < 1) return failure(arfuseInvalidArgument, strprintf("tokens=%d: must be >= 1", req.tokens));
  if (req.tokens > limits.maxTokens)
    return failure(arfuseInvalidArgument,
                   strprintf("tokens=%d exceeds this communicator's maxTokens=%d; create it with a larger "
                             "arfuseConfig_t.maxTokens",
                             req.tokens, limits.maxTokens));
  if (req.hidden < 8 || req.hidden % 8 != 0)
    return failure(arfuseInvalidArgument, strprintf("hidden=%d: must be a positive multiple of 8", req.hidden));
  if (req.hidden > maxSupportedHidden(req.dtype))
    return failure(arfuseUnsupported,
                   strprintf("hidden=%d with dtype %s: the largest supported hidden size is %d "
                             "(one row must fit one thread block's registers)",
                             req.hidden, arfuseDataTypeName(req.dtype), maxSupportedHidden(req.dtype)));
  if (req.hidden > limits.maxHidden)
    return failure(arfuseInvalidArgument,
                   strprintf("hidden=%d exceeds this communicator's maxHidden=%d; create it with a larger "
                             "arfuseConfig_t.maxHidden",
                             req.hidden, limits.maxHidden));
  Plan ok;
  return ok;
}

void localGeometry(int tokens, int hidden, arfuseDataType_t dtype, int smCount, bool extended, int* blocks,
                   int* threads, Geometry* geo) {
  const int nvec = hidden / dtypeVecElems(dtype);
  // Few rows: spread each row over many threads (latency). Many rows: several vectors per thread
  // and several blocks per SM (bandwidth), at most kMaxVecsPerThread per thread.
  const int perThread = tokens >= 2 * smCount ? 4 : 1;
  int t = roundUp((nvec + perThread - 1) / perThread, 32);
  t = std::max(t, roundUp((nvec + kMaxVecsPerThread - 1) / kMaxVecsPerThread, 32));
  t = std::min(kMaxThreads, std::max(perThread == 1 ? 32 : 64, t));
  *threads = t;
  const int perSm = std::max(1, 2048 / t);
  *blocks = std::max(1, std::min(tokens, smCount * perSm));
  geo->chunks = 1;
  geo->chunkVecs = nvec;
  geo->slots = *blocks;
  geo->vecs = instantiatedVecs(arfuseAlgoLocal, extended ? 2 : 1, (nvec + t - 1) / t);
}

int instantiatedVecs(arfuseAlgo_t algo, int kind, int needed) {
  static const int kLl[3][3] = {{1, 2, 4}, {1, 2, 4}, {2, 4, 0}};
  static const int kBarrier[3][3] = {{1, 8, 0}, {1, 2, 8}, {2, 8, 0}};  // 1 and 2: at most 256 threads
  static const int kLocal[3][4] = {{0, 0, 0, 0}, {1, 2, 4, 8}, {2, 8, 0, 0}};
  const int* set = nullptr;
  int count = 0;
  if (kind < 0 || kind > 2) return 0;
  if (algo == arfuseAlgoLowLatency) {
    set = kLl[kind];
    count = 3;
  } else if (algo == arfuseAlgoLocal || algo == arfuseAlgoNccl) {
    set = kLocal[kind];
    count = 4;
  } else {
    set = kBarrier[kind];
    count = 3;
  }
  for (int i = 0; i < count; ++i)
    if (set[i] >= needed) return set[i];
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

bool setBlockCaps(const std::vector<DeviceResidency>& devices, int configCap, Fabric* f, std::string* why) {
  int narrow = kMaxCtas, ll = kLlMaxCtas, wide = kMaxCtas;
  int clusters[9] = {0, 0, kMaxCtas, 0, kMaxCtas, 0, 0, 0, kMaxCtas};
  for (const DeviceResidency& d : devices) {
    const int r = std::max(1, d.ranks);
    narrow = std::min(narrow, d.sms * d.narrow / r);
    ll = std::min(ll, d.sms * d.lowLatency / r);
    wide = std::min(wide, d.sms * d.wide / r);
    for (int c = 2; c <= kMaxChunks; c *= 2) clusters[c] = std::min(clusters[c], d.clusters[c] / r * c);
  }
  if (configCap > 0) {
    narrow = std::min(narrow, configCap);
    ll = std::min(ll, configCap);
    wide = std::min(wide, configCap);
    for (int c = 2; c <= kMaxChunks; c *= 2) clusters[c] = std::min(clusters[c], configCap);
  }
  if (narrow < 1 || ll < 1 || wide < 1) {
    *why = strprintf(
        "too many ranks share one GPU for one CTA of each to be resident at once (per rank: %d narrow, "
        "%d low-latency, %d wide CTAs); use fewer virtual ranks",
        narrow, ll, wide);
    return false;
  }
  f->maxBlocks = narrow;
  f->maxBlocksLowLatency = ll;
  f->maxBlocksWide = wide;
  for (int c = 2; c <= kMaxChunks; c *= 2) f->clusterCtas[c] = clusters[c];
  return true;
}

bool tileGeometry(const Fabric& f, const PlanRequest& r, arfuseAlgo_t algo, int* blocks, int* threads, Geometry* geo,
                  int maxChunks) {
  const int nvec = r.hidden / dtypeVecElems(r.dtype);
  const bool ll = algo == arfuseAlgoLowLatency;
  const int maxThreads = ll ? 256 : kMaxThreads;
  const int llCap = f.maxBlocksLowLatency < 0 ? f.maxBlocks : f.maxBlocksLowLatency;
  const int maxCtas = std::max(1, std::min(ll ? kLlMaxCtas : kMaxCtas, ll ? llCap : f.maxBlocks));
  // Split a row over a cluster while its chunk is large (> 256 vectors = 4 KiB), the chunks stay whole
  // groups of the canonical row reduction, every row still gets its own CTAs, and that many CTAs in
  // clusters fit the GPU at once. Wide tiles (> 512 vectors) are never split.
  int c = 1;
  while (f.clusters && !r.extended && c < std::min(kMaxChunks, maxChunks) && nvec / c > 256 &&
         nvec % (kGroupVecs * 2 * c) == 0 &&
         static_cast<long long>(r.tokens) * 2 * c <=
             std::min(maxCtas, f.clusterCtas[2 * c] < 0 ? maxCtas : f.clusterCtas[2 * c]))
    c *= 2;
  if (nvec / c > 512) c = 1;
  geo->chunks = c;
  geo->chunkVecs = nvec / c;
  const int wideCtas = f.maxBlocksWide < 0 ? maxCtas : std::max(1, std::min(maxCtas, f.maxBlocksWide));
  const int ctas = !ll && geo->chunkVecs > 512 ? wideCtas : maxCtas;
  geo->slots = std::max(1, std::min(r.tokens, ctas / c));
  *blocks = geo->slots * c;
  const int kind = r.extended ? 2 : r.op == arfuseOpAllReduce ? 0 : 1;
  // Low-latency: up to 256 threads, 1, 2 or 4 vectors each. One-shot / two-shot / host-staged: tiles
  // up to 512 vectors on up to 256 threads (1 or 2 vectors each), larger ones on 512 threads with the
  // 8-vector instantiation (device/exchange.cuh barrierMaxThreads).
  const bool small = ll || geo->chunkVecs <= 512;
  *threads = std::min(small ? 256 : maxThreads, std::max(32, roundUp(geo->chunkVecs, 32)));
  const int needed = (geo->chunkVecs + *threads - 1) / *threads;
  geo->vecs = small ? instantiatedVecs(algo, kind, needed) : needed <= 8 ? 8 : 0;
  return geo->vecs > 0;
}

Workspace workspaceFor(const Limits& limits, const Fabric& f, long long hostMessageBytes, bool deterministic) {
  // Regions for every CTA index a barrier path launches; each large enough for the call spread over
  // the fewest CTAs a path may use (the wide 512-thread CTAs' cap can be the smaller one).
  const int wide = f.maxBlocksWide < 0 ? f.maxBlocks : f.maxBlocksWide;
  return workspaceFor(limits, f.nranks, std::max(f.maxBlocks, wide), hostMessageBytes, deterministic,
                      std::min(f.maxBlocks, wide));
}

Workspace workspaceFor(const Limits& limits, int nranks, int maxBlocks, long long hostMessageBytes, bool deterministic,
                       int fewestCtas) {
  Workspace w;
  w.elemBytes = (limits.dtypeMask & ARFUSE_DTYPE_BIT(arfuseFloat32)) ? 4 : 2;
  w.maxRowBytes = static_cast<size_t>(limits.maxHidden) * w.elemBytes;
  const size_t ctas = static_cast<size_t>(std::max(1, std::min(maxBlocks, kMaxCtas)));
  const size_t fewest = fewestCtas > 0 ? std::min(ctas, static_cast<size_t>(fewestCtas)) : ctas;
  const WorkspaceInputs in{limits, nranks, ctas, fewest, hostMessageBytes, deterministic};
  for (const AlgoEntry& e : algoRegistry())
    if (e.workspace) e.workspace(in, &w);
  return w;
}

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

// On failure *why says why (the caller decides whether that is an error or a fallback).
bool barrierGeometry(const PlanContext& c, arfuseAlgo_t algo, Plan* p, std::string* why) {
  const Fabric& f = c.f;
  if (!tileGeometry(f, c.req, algo, &p->blocks, &p->threads, &p->geo, c.policy.maxChunks)) {
    *why = strprintf("no %s kernel covers %d vectors per CTA", arfuseAlgoName(algo), p->geo.chunkVecs);
    return false;
  }
  long long use = ctaRegionUse(p->geo, c.req.tokens);
  long long cap = 0;
  switch (algo) {
    case arfuseAlgoLowLatency:  // flagged bytes: a narrow tile takes whole 1 KiB groups
      use = llRegionUse(p->geo, c.req.tokens);
      cap = static_cast<long long>(kLlRegionBytes);
      break;
    case arfuseAlgoHostStaged:
      cap = f.hostRegionBytes;
      if (hostTwoShot(f, c.policy, c.bytes)) {  // pushed slots; the own slice's copy in the staging too
        use = twoShotRegionUse(p->geo, c.req.tokens, f.nranks);
        if (f.stagingRegionBytes > 0) cap = std::min(cap, f.stagingRegionBytes);
      }
      break;
    case arfuseAlgoTwoShot:
      use = twoShotRegionUse(p->geo, c.req.tokens, f.nranks);
      cap = f.stagingRegionBytes;
      break;
    default:
      cap = f.stagingRegionBytes;
  }
  if (cap > 0 && use > cap) {
    *why =
        strprintf("%s: a CTA would carry %lld B (%d tiles of %d vectors), more than its %lld B region",
                  arfuseAlgoName(algo), use, (c.req.tokens + p->geo.slots - 1) / p->geo.slots, p->geo.chunkVecs, cap);
    return false;
  }
  p->pdl = f.pdl;
  return true;
}

bool localGeometry(const PlanContext& c, Plan* p, std::string*) {
  ::arfuse::localGeometry(c.req.tokens, c.req.hidden, c.req.dtype, c.f.smCount, c.req.extended, &p->blocks, &p->threads,
                          &p->geo);
  p->pdl = c.f.pdl;
  return true;
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

namespace {

// The call's geometry on entry e: the one its canImplement computed, else its geometry function's
// (on a fresh plan; false with *why if nothing covers the call).
bool geometryOf(const AlgoEntry& e, const PlanContext& c, const Verdict& v, Plan* p, std::string* why) {
  if (!v.hasGeometry) return e.geometry(c, p, why);
  *p = v.geometry;
  return true;
}

// The entry the caller forced, or the refusal.
Plan planForced(const AlgoEntry* e, const PlanContext& c) {
  if (!e)
    return failure(arfuseInvalidArgument, strprintf("algo=%d (forced by %s): not an algorithm for %d ranks; use auto, "
                                                    "lowlatency, oneshot, twoshot, hoststaged or nccl",
                                                    c.policy.forcedAlgo, c.forcedBy, c.f.nranks));
  const Verdict v = e->canImplement(c);
  if (!v.ok) return failure(v.code, v.reason);
  Plan p;
  std::string why;
  if (!geometryOf(*e, c, v, &p, &why))
    return failure(arfuseUnsupported,
                   strprintf("algo=%s (forced by %s): %s; use auto", e->name, c.forcedBy, why.c_str()));
  p.algo = e->algo;
  p.reason = v.reason;
  return p;
}

// The first entry that takes the call.
Plan planAuto(const PlanContext& c) {
  const Fabric& f = c.f;
  for (const AlgoEntry& e : algoRegistry()) {
    const Verdict v = e.canImplement(c);
    if (!v.ok) continue;
    Plan p;
    std::string why;
    const bool cut = geometryOf(e, c, v, &p, &why);
    p.algo = e.algo;
    p.reason = v.reason;
    if (cut) return p;
    // A path's regions hold any call the communicator accepts; reaching this is a bug, which
    // NCCL, the always-correct fallback, serves when it exists.
    const AlgoEntry* nccl = findAlgo(arfuseAlgoNccl);
    if (!f.nccl || !nccl) return failure(arfuseInternalError, why);
    p.algo = arfuseAlgoNccl;
    p.reason = "nccl: " + why;
    nccl->geometry(c, &p, &why);
    return p;
  }
  return failure(arfuseUnsupported, strprintf("no path: peer access is missing (%s), NCCL is unavailable (%s) "
                                              "and host staging is unavailable (%s)",
                                              planning::why(f.p2pDetail, planning::kNoP2pWhy).c_str(),
                                              planning::why(f.ncclDetail, planning::kNoNcclWhy).c_str(),
                                              planning::why(f.hostStagedDetail, planning::kNoHostWhy).c_str()));
}

}  // namespace

Plan makePlan(const Fabric& f, const Limits& limits, const PlanPolicy& policy, const PlanRequest& req) {
  Plan p = validateShape(limits, req);
  if (p.status != arfuseSuccess) return p;

  const long long bytes = static_cast<long long>(req.tokens) * req.hidden * dtypeSize(req.dtype);
  const std::string forcedBy = planning::why(policy.forcedBy, "the caller");
  if (f.nranks == 1 && policy.forcedAlgo != arfuseAlgoAuto && policy.forcedAlgo != arfuseAlgoLocal)
    return failure(arfuseUnsupported, strprintf("algo=%s (forced by %s) needs >= 2 ranks; this communicator has 1",
                                                arfuseAlgoName(arfuseAlgo_t(policy.forcedAlgo)), forcedBy.c_str()));
  const bool calibrated = !policy.calibratedFrom.empty();
  const char* origin = calibrated                      ? policy.calibratedFrom.c_str()
                       : !policy.builtinOrigin.empty() ? policy.builtinOrigin.c_str()
                                                       : "built-in default, not calibrated";
  // One rank is always local, forced or not.
  const bool forced = policy.forcedAlgo != arfuseAlgoAuto && f.nranks > 1;
  const PlanContext c{f,
                      limits,
                      policy,
                      req,
                      forced,
                      bytes,
                      req.op == arfuseOpAllReduce ? "allreduce" : "allreduce+add+rmsnorm",
                      forcedBy.c_str(),
                      origin,
                      calibrated};
  return forced ? planForced(findAlgo(arfuseAlgo_t(policy.forcedAlgo)), c) : planAuto(c);
}

}  // namespace arfuse
