// The host-staged path's steps, bound to its registry entry: the kernel's arguments, then the
// one-shot or two-shot variant's launch over the host exchange.
#include "algos/issue.h"

#include "algos/hoststaged/launch.h"
#include "init/group.h"

namespace arfuse {
namespace {

Status launch(const AlgoLaunch& c) {
  return kernelLaunchStatus(launchHostStaged(c.l, c.variant, c.args<KernelArgs>(), c.stream), c.l);
}

[[maybe_unused]] const bool kBound =
    bindAlgoIssue(arfuseAlgoHostStaged, AlgoIssue{prepareMultiRankArgs, nullptr, launch, residencyHostStaged});

}  // namespace
}  // namespace arfuse
