// The host-staged path's steps, bound to its registry entry: the kernel's arguments, the one-shot or two-shot variant's
// launch over the host exchange, their residency.
#include "algos/issue.h"

#include "algos/hoststaged/launch.h"
#include "init/group.h"

namespace arfuse {
namespace {

[[maybe_unused]] const bool kBound =
    bindAlgoIssue(arfuseAlgoHostStaged,
                  AlgoIssue{prepareMultiRankArgs, nullptr, launchKernelVariant<launchHostStaged>, residencyHostStaged});

}  // namespace
}  // namespace arfuse
