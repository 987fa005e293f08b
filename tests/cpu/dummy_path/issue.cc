// The dummy path's issue steps, as a new path's folder holds them (src/algos/<path>/issue.cc): its
// prepare step builds its own arguments from the call; its "launch" (no kernel: the CPU test has no
// GPU) only counts.
#include "algos/registry.h"

namespace arfuse {

int dummyLaunches = 0;  // read by tests/cpu/dummy_path_test.cc

struct DummyArgs {
  const void* x;
  void* out;
  int rows;
  float eps;
};

namespace {

Status prepare(const PrepareContext& p, AlgoLaunch* out) {
  DummyArgs& a = out->args<DummyArgs>();
  a = DummyArgs{p.call.x, p.call.residualOut, p.call.tokens, p.call.eps};
  out->l.threads = 96;
  return Status();
}

Status launch(const AlgoLaunch& call) {
  if (call.args<DummyArgs>().rows != 3) return ARFUSE_FAIL(arfuseInternalError, "dummy: prepared for 3 rows");
  ++dummyLaunches;
  return Status();
}

[[maybe_unused]] const bool kBound = bindAlgoIssue(arfuseAlgo_t(15), AlgoIssue{prepare, nullptr, launch});

}  // namespace
}  // namespace arfuse
