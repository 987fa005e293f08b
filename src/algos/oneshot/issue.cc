// The oneshot path's steps, bound to its registry entry: the multi-rank kernel's arguments, then its launch.
#include "algos/issue.h"

#include "algos/oneshot/launch.h"
#include "init/group.h"

namespace arfuse {
namespace {

Status launch(const AlgoLaunch& c) {
  return kernelLaunchStatus(launchOneShot(c.l, c.args<KernelArgs>(), c.stream), c.l);
}

[[maybe_unused]] const bool kBound =
    bindAlgoIssue(arfuseAlgoOneShot, AlgoIssue{prepareMultiRankArgs, nullptr, launch, residencyOneShot});

}  // namespace
}  // namespace arfuse
