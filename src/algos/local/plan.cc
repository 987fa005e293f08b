// The local path's registry entry: one rank, no communication (the single-GPU add+RMSNorm kernel,
// or a copy for a plain all-reduce).
#include "algos/shared.h"

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

}  // namespace

AlgoEntry localEntry() {
  return AlgoEntry{arfuseAlgoLocal, "local", "Local", canImplement, planning::localGeometry, nullptr};
}

}  // namespace arfuse
