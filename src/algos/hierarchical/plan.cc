#include "algos/hierarchical/plan.h"

#include <algorithm>

#include "algos/registry.h"
#include "common/log.h"
#include "device/args.h"

namespace arfuse {

void hierarchicalScatterGeometry(const Fabric& f, long long sliceElems, arfuseDataType_t dtype, int* blocks,
                                 int* threads) {
  const long long vecs = sliceElems / dtypeVecElems(dtype);  // 16-byte vectors of the slice
  *threads = 256;
  const long long want = (vecs + 4 * 256 - 1) / (4 * 256);  // about 4 vectors per thread and source
  *blocks =
      static_cast<int>(std::max<long long>(1, std::min<long long>(want, std::min<long long>(f.maxBlocks, kMaxCtas))));
}

Verdict hierarchicalGatherGeometry(const Fabric& f, const PlanRequest& req) {
  const int nvec = req.hidden / dtypeVecElems(req.dtype);
  const bool fused = req.op == arfuseOpAllReduceAddRmsNorm;
  int vecs = 0, threads = 0;
  if (nvec <= 256) {
    vecs = 1;
    threads = (nvec + 31) / 32 * 32;
  } else if (nvec <= 512 && fused) {
    vecs = 2;
    threads = 256;
  } else if (nvec <= kMaxVecsPerRow) {
    vecs = 8;
    threads = ((nvec + 7) / 8 + 31) / 32 * 32;
  } else {
    return Verdict::no(
        strprintf("hierarchical: a row of %d vectors is longer than the %d one CTA holds", nvec, kMaxVecsPerRow));
  }
  const int cap = std::max(1, std::min(vecs == 8 ? f.maxBlocksWide : f.maxBlocks, kMaxCtas));
  Plan p;
  p.blocks = std::min(req.tokens, cap);
  p.threads = threads;
  p.geo.chunks = 1;
  p.geo.chunkVecs = nvec;
  p.geo.slots = p.blocks;
  p.geo.vecs = vecs;
  p.pdl = f.pdl;
  return Verdict::fitted(p);
}

namespace {

// Bytes per rank that cross hosts: the path's fp32 slice (1/L of the elements at 4 B).
long long sliceBytes(const PlanContext& c) {
  return hierarchicalSliceElems(static_cast<long long>(c.req.tokens) * c.req.hidden, c.f.localRanks) * 4;
}

std::string hostsShape(const Fabric& f) { return strprintf("%d hosts x %d ranks", f.hosts, f.localRanks); }

// Why the auto plan of a group that spans hosts leaves a call to the nccl path ("": it does not),
// against whose whole message in its dtype the slice is weighed.
std::string declines(const PlanContext& c) {
  const Fabric& f = c.f;
  const long long slice = sliceBytes(c);
  if (c.req.extended) return "the extended epilogue (arfuseAllReduceEpilogue) runs on the nccl path across hosts";
  if (c.policy.deterministic)
    return "deterministic: all-gather + fp32 sum in global rank order (the bits of every arfuse path)";
  if (f.localRanks < 2) return "one rank per host: the hierarchical path would send the whole message across hosts too";
  if (!f.hierarchical) return "hierarchical unavailable: " + f.hierarchicalDetail;
  if (slice >= c.bytes)
    return strprintf(
        "the hierarchical path's fp32 slice (1/%d of the elements, %lld B) is no fewer bytes across "
        "hosts than the whole %s message",
        f.localRanks, slice, arfuseDataTypeName(c.req.dtype));
  if (c.bytes < kHierarchicalMinBytes)
    return strprintf(
        "%lld B < %lld B, below which the two intra-host phases cost more than the fewer bytes across "
        "hosts (%lld B fp32 per rank instead of %lld B) save",
        c.bytes, kHierarchicalMinBytes, slice, c.bytes);
  return "";
}

// A yes with the gather kernel's geometry, or why no instantiation covers the row.
Verdict withGeometry(const PlanContext& c, std::string reason) {
  Verdict v = hierarchicalGatherGeometry(c.f, c.req);
  if (v.ok) v.reason = std::move(reason);
  return v;
}

// Within one host the path is refused when forced and never chosen.
Verdict canImplementOnOneHost(const PlanContext& c) {
  if (c.forced)
    return Verdict::no(
        strprintf("algo=hierarchical (forced by %s) needs a group that spans hosts (arfuseCommInitRank "
                  "over several hosts); these %d ranks are on one host: use auto",
                  c.forcedBy, c.f.nranks));
  return Verdict::no("hierarchical: the group is on one host");
}

Verdict canImplement(const PlanContext& c) {
  if (!c.acrossHosts()) return canImplementOnOneHost(c);
  const Fabric& f = c.f;
  if (c.forced) {
    if (!f.hierarchical)
      return Verdict::no(strprintf("algo=hierarchical (forced by %s) is unavailable: %s; use auto or nccl", c.forcedBy,
                                   f.hierarchicalDetail.c_str()));
    if (c.req.extended)
      return Verdict::no(strprintf(
          "algo=hierarchical (forced by %s) has no extended epilogue (arfuseAllReduceEpilogue); use auto or nccl",
          c.forcedBy));
    return withGeometry(c, strprintf("hierarchical: forced by %s (%lld B, %s; %lld B fp32 per rank cross hosts)",
                                     c.forcedBy, c.bytes, hostsShape(f).c_str(), sliceBytes(c)));
  }
  const std::string why = declines(c);
  if (!why.empty()) return Verdict::no(why);
  return withGeometry(
      c, strprintf("hierarchical: %s, %lld B >= %lld B: 1/%d of the elements cross hosts, %lld B "
                   "fp32 per rank instead of the whole %lld B",
                   hostsShape(f).c_str(), c.bytes, kHierarchicalMinBytes, f.localRanks, sliceBytes(c), c.bytes));
}

Verdict geometry(const PlanContext& c) {
  if (c.acrossHosts()) return hierarchicalGatherGeometry(c.f, c.req);
  return Verdict::no("hierarchical: the group is on one host");
}

}  // namespace

AlgoEntry hierarchicalEntry() {
  AlgoEntry e;
  e.algo = arfuseAlgoHierarchical;
  e.name = "hierarchical";
  e.enumName = "Hierarchical";
  e.canImplement = canImplement;
  e.geometry = geometry;
  e.acrossHosts = true;
  return e;
}

}  // namespace arfuse
