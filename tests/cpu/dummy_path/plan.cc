// A dummy path's registry entry, as a new path's folder holds it (src/algos/<path>/plan.cc): it
// takes calls of exactly 3 tokens, with a fixed grid. tests/cpu/dummy_path_test.cc builds the
// registry with this folder and one more line in its list, and nothing else.
#include "algos/shared.h"

namespace arfuse {
namespace {

Verdict canImplement(const PlanContext& c) {
  if (c.req.tokens != 3) {
    if (c.forced) return Verdict::no(strprintf("algo=dummy (forced by %s) takes 3 tokens only", c.forcedBy));
    return Verdict::no("dummy: 3 tokens only");
  }
  if (!c.forced && !c.f.p2p) return planning::noPeerAccess(c);
  return Verdict::yes(strprintf("dummy: %lld B in 3 tokens%s", c.bytes, c.forced ? " (forced)" : ""));
}

Verdict geometry(const PlanContext& c) {
  Plan p;
  p.blocks = 7;
  p.threads = 96;
  p.pdl = c.f.pdl;
  return Verdict::fitted(p);
}

void workspace(const WorkspaceInputs&, Workspace* w) { w->llBytes += 4096; }

}  // namespace

AlgoEntry dummyEntry() { return AlgoEntry{arfuseAlgo_t(15), "dummy", "Dummy", canImplement, geometry, workspace}; }

}  // namespace arfuse
