// The local path's registry entry: one rank, no communication (the single-GPU add+RMSNorm kernel,
// or a copy for a plain all-reduce).
#include "algos/local/plan.h"

#include <algorithm>

#include "algos/shared.h"
#include "device/args.h"

namespace arfuse {
namespace {

Verdict canImplement(const PlanContext& c) {
  if (c.forced)  // forced with several ranks: not an algorithm for them
    return Verdict::no(strprintf("algo=%d (forced by %s): not an algorithm for %d ranks; use %s", c.policy.forcedAlgo,
                                 c.forcedBy, c.f.nranks, algoNamesText().c_str()),
                       arfuseInvalidArgument);
  if (c.f.nranks != 1) return Verdict::no("local: needs 1 rank");
  return Verdict::yes(strprintf("local: 1 rank, %s of %lld B needs no communication", c.op, c.bytes));
}

int roundUp(int x, int m) { return (x + m - 1) / m * m; }

// The add+RMSNorm kernel's instantiations (algos/local/launch.h): fused 1, 2, 4 or 8 vectors per thread,
// extended 2 or 8 (the all-reduce kind sums gathered sources at any width and is picked by kind alone).
const VecSets kLocalVecs = {{{0, 0, 0, 0}, {1, 2, 4, 8}, {2, 8, 0, 0}}};

}  // namespace

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
  geo->vecs = instantiatedVecs(kLocalVecs, extended ? 2 : 1, (nvec + t - 1) / t);
}

namespace planning {

Verdict localGeometry(const PlanContext& c) {
  Plan p;
  ::arfuse::localGeometry(c.req.tokens, c.req.hidden, c.req.dtype, c.f.smCount, c.req.extended, &p.blocks, &p.threads,
                          &p.geo);
  p.pdl = c.f.pdl;
  return Verdict::fitted(p);
}

}  // namespace planning

AlgoEntry localEntry() {
  return AlgoEntry{arfuseAlgoLocal, "local", "Local", canImplement, planning::localGeometry, nullptr};
}

}  // namespace arfuse
