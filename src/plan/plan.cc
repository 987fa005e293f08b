#include "plan/plan.h"

#include <algorithm>
#include <climits>

#include "common/enum_arg.h"
#include "diag/log.h"
#include "kernels/kernel_args.h"

namespace arfuse {
namespace {

int roundUp(int x, int m) { return (x + m - 1) / m * m; }

Plan failure(arfuseResult_t status, std::string msg) {
  Plan p;
  p.status = status;
  p.reason = std::move(msg);
  return p;
}

void multiRankGeometry(const Fabric& f, const PlanRequest& r, Plan* p) {
  const int nvec = r.hidden / dtypeVecElems(r.dtype);
  p->threads = std::min(kMaxThreads, std::max(32, roundUp(nvec, 32)));
  p->blocks = std::max(1, std::min(r.tokens, f.maxBlocks));
}

// A policy limit as text; LLONG_MAX (a calibrated path that was fastest up to the largest size
// measured) reads "unlimited".
std::string limitText(long long v) { return v == LLONG_MAX ? std::string("unlimited") : strprintf("%lld B", v); }

// Host-staged: one-shot or two-shot by the bytes each rank pulls over its link.
void chooseHostVariant(const Fabric& f, const PlanPolicy& policy, long long bytes, Plan* p) {
  const long long peerBytes = bytes * (f.nranks - 1);
  p->twoShotVariant = f.nranks > 2 && peerBytes > policy.hostOneShotMaxBytes;
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
    return failure(arfuseUnsupported, strprintf("hidden=%d with dtype %s: the largest supported hidden size is %d "
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

void localGeometry(int tokens, int hidden, arfuseDataType_t dtype, int smCount, int* blocks, int* threads) {
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
}

Plan makePlan(const Fabric& f, const Limits& limits, const PlanPolicy& policy, const PlanRequest& req) {
  Plan p = validateShape(limits, req);
  if (p.status != arfuseSuccess) return p;

  const long long bytes = static_cast<long long>(req.tokens) * req.hidden * dtypeSize(req.dtype);
  const char* op = req.op == arfuseOpAllReduce ? "allreduce" : "allreduce+add+rmsnorm";

  if (f.nranks == 1) {
    if (policy.forcedAlgo != arfuseAlgoAuto && policy.forcedAlgo != arfuseAlgoLocal)
      return failure(arfuseUnsupported, strprintf("algo=%s (forced by %s) needs >= 2 ranks; this communicator has 1",
                                                  arfuseAlgoName(arfuseAlgo_t(policy.forcedAlgo)), policy.forcedBy.c_str()));
    p.algo = arfuseAlgoLocal;
    localGeometry(req.tokens, req.hidden, req.dtype, f.smCount, &p.blocks, &p.threads);
    p.reason = strprintf("local: 1 rank, %s of %lld B needs no communication", op, bytes);
    return p;
  }

  const char* forcedBy = policy.forcedBy.c_str();
  switch (policy.forcedAlgo) {
    case arfuseAlgoAuto:
      break;
    case arfuseAlgoLowLatency:
      if (f.p2p && bytes > f.lowLatencyMaxBytes)
        return failure(arfuseUnsupported, strprintf("algo=lowlatency (forced by %s) carries at most %lld B per rank; "
                                                    "this call has %lld B (tokens=%d x hidden=%d); use auto",
                                                    forcedBy, f.lowLatencyMaxBytes, bytes, req.tokens, req.hidden));
      [[fallthrough]];  // the same peer-access requirement as one-shot
    case arfuseAlgoOneShot:
    case arfuseAlgoTwoShot:
      if (!f.p2p)
        return failure(arfuseUnsupported, strprintf("algo=%s (forced by %s) needs peer access between all ranks: %s; "
                                                    "use algo=nccl or auto",
                                                    arfuseAlgoName(arfuseAlgo_t(policy.forcedAlgo)), forcedBy,
                                                    f.p2pDetail.c_str()));
      p.algo = arfuseAlgo_t(policy.forcedAlgo);
      multiRankGeometry(f, req, &p);
      p.reason = strprintf("%s: forced by %s (%lld B, %d ranks)", arfuseAlgoName(p.algo), forcedBy, bytes, f.nranks);
      return p;
    case arfuseAlgoHostStaged:
      if (!f.hostStaged)
        return failure(arfuseUnsupported, strprintf("algo=hoststaged (forced by %s) is unavailable: %s", forcedBy,
                                                    f.hostStagedDetail.c_str()));
      if (bytes > f.hostStagedCapacity)
        return failure(arfuseUnsupported, strprintf("algo=hoststaged (forced by %s) carries at most %lld B per rank "
                                                    "(the host exchange area); this call has %lld B (tokens=%d x "
                                                    "hidden=%d); use auto",
                                                    forcedBy, f.hostStagedCapacity, bytes, req.tokens, req.hidden));
      p.algo = arfuseAlgoHostStaged;
      multiRankGeometry(f, req, &p);
      chooseHostVariant(f, policy, bytes, &p);
      p.reason = strprintf("hoststaged (%s variant): forced by %s (%lld B, %d ranks)",
                           p.twoShotVariant ? "two-shot" : "one-shot", forcedBy, bytes, f.nranks);
      return p;
    case arfuseAlgoNccl:
      if (!f.nccl)
        return failure(arfuseUnsupported,
                       strprintf("algo=nccl (forced by %s) is unavailable: %s", forcedBy, f.ncclDetail.c_str()));
      p.algo = arfuseAlgoNccl;
      p.reason = strprintf("nccl: forced by %s (%lld B, %d ranks)", forcedBy, bytes, f.nranks);
      localGeometry(req.tokens, req.hidden, req.dtype, f.smCount, &p.blocks, &p.threads);
      return p;
    default:
      return failure(arfuseInvalidArgument, strprintf("algo=%d (forced by %s): not an algorithm for %d ranks; use auto, "
                                                      "lowlatency, oneshot, twoshot, hoststaged or nccl",
                                                      policy.forcedAlgo, forcedBy, f.nranks));
  }

  const bool calibrated = !policy.calibratedFrom.empty();
  const char* origin = calibrated                        ? policy.calibratedFrom.c_str()
                       : !policy.builtinOrigin.empty() ? policy.builtinOrigin.c_str()
                                                       : "built-in default, not calibrated";
  if (!f.p2p) {
    const bool hostOk =
        f.hostStaged && bytes <= f.hostStagedCapacity && (bytes <= policy.hostStagedMaxBytes || !f.nccl);
    if (hostOk) {
      p.algo = arfuseAlgoHostStaged;
      multiRankGeometry(f, req, &p);
      chooseHostVariant(f, policy, bytes, &p);
      p.reason = strprintf("hoststaged (%s variant): no peer access between ranks (%s); %lld B %s",
                           p.twoShotVariant ? "two-shot" : "one-shot", f.p2pDetail.c_str(), bytes,
                           bytes <= policy.hostStagedMaxBytes ? strprintf("<= host-staged limit (%s)", origin).c_str()
                                                              : "and NCCL is unavailable");
      return p;
    }
    if (!f.nccl)
      return failure(arfuseUnsupported, strprintf("no path: peer access is missing (%s), NCCL is unavailable (%s) "
                                                  "and host staging is unavailable (%s)",
                                                  f.p2pDetail.c_str(), f.ncclDetail.c_str(),
                                                  f.hostStagedDetail.c_str()));
    p.algo = arfuseAlgoNccl;
    localGeometry(req.tokens, req.hidden, req.dtype, f.smCount, &p.blocks, &p.threads);
    if (f.hostStaged)
      p.reason = strprintf("nccl: no peer access between ranks (%s); %lld B > host-staged limit %s (%s)",
                           f.p2pDetail.c_str(), bytes, limitText(policy.hostStagedMaxBytes).c_str(), origin);
    else
      p.reason = strprintf("nccl: no peer access between ranks (%s); host staging unavailable (%s)",
                           f.p2pDetail.c_str(), f.hostStagedDetail.c_str());
    return p;
  }
  // One-shot reads (n-1) x bytes from peers with one barrier; two-shot reads 2(n-1)/n x bytes with
  // two. At 2 ranks both read the same bytes, so one-shot always wins (measured on 2 x H200 NVLink:
  // 13.4 vs 16.5 us at 128 tokens, 119 vs 137 us at 2048); beyond, two-shot once bytes dominate.
  // A calibration replaces the 2-rank rule and the limits with what was measured on this machine.
  const long long peerBytes = bytes * (f.nranks - 1);
  const bool llCapped = policy.lowLatencyMaxBytes >= 0 && policy.lowLatencyMaxBytes < f.lowLatencyMaxBytes;
  const long long llMax = llCapped ? policy.lowLatencyMaxBytes : f.lowLatencyMaxBytes;
  if (bytes <= llMax) {
    p.algo = arfuseAlgoLowLatency;
    p.reason = strprintf("lowlatency: %lld B <= %lld B%s: rows pushed with readiness in every word, no separate "
                         "barrier",
                         bytes, llMax, llCapped ? strprintf(" (%s)", origin).c_str() : "");
  } else if (f.nccl && policy.ncclAboveBytes >= 0 && bytes > policy.ncclAboveBytes) {
    p.algo = arfuseAlgoNccl;
    p.reason = strprintf("nccl: %lld B > %lld B, above which NCCL measured faster than every arfuse path (%s)", bytes,
                         policy.ncclAboveBytes, origin);
    localGeometry(req.tokens, req.hidden, req.dtype, f.smCount, &p.blocks, &p.threads);
    return p;
  } else if (f.nranks == 2 && !calibrated) {
    p.algo = arfuseAlgoOneShot;
    p.reason = strprintf("oneshot: 2 ranks, where two-shot moves the same %lld B per rank and adds a barrier", bytes);
  } else if (peerBytes <= policy.oneShotMaxBytes) {
    p.algo = arfuseAlgoOneShot;
    p.reason = strprintf("oneshot: %lld B x %d peers = %lld B <= one-shot limit %s (%s)", bytes, f.nranks - 1,
                         peerBytes, limitText(policy.oneShotMaxBytes).c_str(), origin);
  } else {
    p.algo = arfuseAlgoTwoShot;
    p.reason = strprintf("twoshot: %lld B x %d peers = %lld B > one-shot limit %s (%s)", bytes, f.nranks - 1, peerBytes,
                         limitText(policy.oneShotMaxBytes).c_str(), origin);
  }
  multiRankGeometry(f, req, &p);
  return p;
}

}  // namespace arfuse
