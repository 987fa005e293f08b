#include "algos/hierarchical/plan.h"

#include <algorithm>

#include "algos/registry.h"
#include "common/log.h"
#include "device/args.h"

namespace arfuse {
namespace {

const char* forcedByText(const PlanPolicy& policy) {
  return policy.forcedBy.empty() ? "the caller" : policy.forcedBy.c_str();
}

void planNccl(const MultiHostFabric& f, const PlanRequest& req, Plan* p) {
  p->algo = arfuseAlgoNccl;
  localGeometry(req.tokens, req.hidden, req.dtype, f.smCount, req.extended, &p->blocks, &p->threads, &p->geo);
  p->pdl = f.pdl;
}

}  // namespace

long long hierarchicalSliceElems(long long count, int localRanks) {
  const int l = std::max(1, localRanks);
  const long long s = (count + l - 1) / l;
  return (s + 7) / 8 * 8;
}

void hierarchicalScatterGeometry(const MultiHostFabric& f, long long sliceElems, arfuseDataType_t dtype, int* blocks,
                                 int* threads) {
  const long long vecs = sliceElems / dtypeVecElems(dtype);  // 16-byte vectors of the slice
  *threads = 256;
  const long long want = (vecs + 4 * 256 - 1) / (4 * 256);  // about 4 vectors per thread and source
  *blocks =
      static_cast<int>(std::max<long long>(1, std::min<long long>(want, std::min<long long>(f.maxBlocks, kMaxCtas))));
}

bool hierarchicalGatherGeometry(const MultiHostFabric& f, const PlanRequest& req, Plan* p, std::string* why) {
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
    *why = strprintf("hierarchical: a row of %d vectors is longer than the %d one CTA holds", nvec, kMaxVecsPerRow);
    return false;
  }
  const int cap = std::max(1, std::min(vecs == 8 ? f.maxBlocksWide : f.maxBlocks, kMaxCtas));
  p->blocks = std::min(req.tokens, cap);
  p->threads = threads;
  p->geo.chunks = 1;
  p->geo.chunkVecs = nvec;
  p->geo.slots = p->blocks;
  p->geo.vecs = vecs;
  p->pdl = f.pdl;
  return true;
}

Plan makeMultiHostPlan(const MultiHostFabric& f, const Limits& limits, const PlanPolicy& policy,
                       const PlanRequest& req) {
  Plan p = validateShape(limits, req);
  if (p.status != arfuseSuccess) return p;
  const long long bytes = static_cast<long long>(req.tokens) * req.hidden * dtypeSize(req.dtype);
  // Bytes per rank that cross hosts: the hierarchical path's fp32 slice (1/L of the elements at 4 B),
  // against the nccl path's whole message in its dtype.
  const long long slice = hierarchicalSliceElems(static_cast<long long>(req.tokens) * req.hidden, f.localRanks) * 4;
  const std::string shape = strprintf("%d hosts x %d ranks", f.hosts, f.localRanks);
  auto hierarchical = [&](const std::string& reason) {
    std::string why;
    if (!hierarchicalGatherGeometry(f, req, &p, &why)) return failedPlan(arfuseUnsupported, why);
    p.algo = arfuseAlgoHierarchical;
    p.reason = reason;
    return p;
  };
  switch (policy.forcedAlgo) {
    case arfuseAlgoAuto:
      break;
    case arfuseAlgoNccl:
      planNccl(f, req, &p);
      p.reason = strprintf("nccl: forced by %s (%lld B, %s%s)", forcedByText(policy), bytes, shape.c_str(),
                           policy.deterministic ? ", deterministic: all-gather + rank-order fp32 sum" : "");
      return p;
    case arfuseAlgoHierarchical:
      if (!f.hierarchical)
        return failedPlan(arfuseUnsupported, strprintf("algo=hierarchical (forced by %s) is unavailable: %s; use auto "
                                                       "or nccl",
                                                       forcedByText(policy), f.hierarchicalDetail.c_str()));
      if (req.extended)
        return failedPlan(arfuseUnsupported, strprintf("algo=hierarchical (forced by %s) has no extended epilogue "
                                                       "(arfuseAllReduceEpilogue); use auto or nccl",
                                                       forcedByText(policy)));
      return hierarchical(strprintf("hierarchical: forced by %s (%lld B, %s; %lld B fp32 per rank cross hosts)",
                                    forcedByText(policy), bytes, shape.c_str(), slice));
    default:
      return failedPlan(
          arfuseUnsupported,
          strprintf("algo=%s (forced by %s) runs within one host; this group spans %s: use auto, nccl or "
                    "hierarchical",
                    arfuseAlgoName(arfuseAlgo_t(policy.forcedAlgo)), forcedByText(policy), shape.c_str()));
  }
  std::string why;
  if (req.extended)
    why = "the extended epilogue (arfuseAllReduceEpilogue) runs on the nccl path across hosts";
  else if (policy.deterministic)
    why = "deterministic: all-gather + fp32 sum in global rank order (the bits of every arfuse path)";
  else if (f.localRanks < 2)
    why = "one rank per host: the hierarchical path would send the whole message across hosts too";
  else if (!f.hierarchical)
    why = "hierarchical unavailable: " + f.hierarchicalDetail;
  else if (slice >= bytes)
    why = strprintf(
        "the hierarchical path's fp32 slice (1/%d of the elements, %lld B) is no fewer bytes across "
        "hosts than the whole %s message",
        f.localRanks, slice, arfuseDataTypeName(req.dtype));
  else if (bytes < kHierarchicalMinBytes)
    why = strprintf(
        "%lld B < %lld B, below which the two intra-host phases cost more than the fewer bytes across "
        "hosts (%lld B fp32 per rank instead of %lld B) save",
        bytes, kHierarchicalMinBytes, slice, bytes);
  if (why.empty())
    return hierarchical(
        strprintf("hierarchical: %s, %lld B >= %lld B: 1/%d of the elements cross hosts, %lld B "
                  "fp32 per rank instead of the whole %lld B",
                  shape.c_str(), bytes, kHierarchicalMinBytes, f.localRanks, slice, bytes));
  planNccl(f, req, &p);
  p.reason = strprintf("nccl: %s, %lld B; %s", shape.c_str(), bytes, why.c_str());
  return p;
}

// The registry entry. The intra-host plan (plan/plan.cc) walks it like every path, but only groups
// that span hosts (makeMultiHostPlan above) can take a hierarchical call: within one host it is
// refused when forced and never chosen.
namespace {

Verdict canImplementOnOneHost(const PlanContext& c) {
  if (c.forced)
    return Verdict::no(
        strprintf("algo=hierarchical (forced by %s) needs a group that spans hosts (arfuseCommInitRank "
                  "over several hosts); these %d ranks are on one host: use auto",
                  c.forcedBy, c.f.nranks));
  return Verdict::no("hierarchical: the group is on one host");
}

bool noGeometry(const PlanContext&, Plan*, std::string* why) {
  *why = "hierarchical: the group is on one host";
  return false;
}

}  // namespace

AlgoEntry hierarchicalEntry() {
  AlgoEntry e;
  e.algo = arfuseAlgoHierarchical;
  e.name = "hierarchical";
  e.canImplement = canImplementOnOneHost;
  e.geometry = noGeometry;
  return e;
}

}  // namespace arfuse
