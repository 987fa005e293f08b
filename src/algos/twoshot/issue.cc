// The twoshot path's steps, bound to its registry entry: the multi-rank kernel's arguments, then its launch.
#include "algos/issue.h"

#include "algos/twoshot/launch.h"
#include "init/group.h"

namespace arfuse {
namespace {

Status launch(const AlgoLaunch& c) {
  return kernelLaunchStatus(launchTwoShot(c.l, c.args<KernelArgs>(), c.stream), c.l);
}

[[maybe_unused]] const bool kBound =
    bindAlgoIssue(arfuseAlgoTwoShot, AlgoIssue{prepareMultiRankArgs, nullptr, launch, residencyTwoShot});

}  // namespace
}  // namespace arfuse
