// The lowlatency path's steps, bound to its registry entry: the kernel's arguments, then its launch
// (the two-phase variant when the plan says so).
#include "algos/issue.h"

#include "algos/lowlatency/launch.h"
#include "init/group.h"

namespace arfuse {
namespace {

Status launch(const AlgoLaunch& c) {
  return kernelLaunchStatus(launchLowLatency(c.l, c.variant, c.args<KernelArgs>(), c.stream), c.l);
}

[[maybe_unused]] const bool kBound =
    bindAlgoIssue(arfuseAlgoLowLatency, AlgoIssue{prepareMultiRankArgs, nullptr, launch, residencyLowLatency});

}  // namespace
}  // namespace arfuse
