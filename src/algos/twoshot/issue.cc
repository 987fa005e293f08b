// The two-shot path's steps, bound to its registry entry: the multi-rank kernel's arguments (the group's and the
// call's), its launch and residency.
#include "algos/issue.h"

#include "algos/twoshot/launch.h"
#include "init/group.h"

namespace arfuse {
namespace {

[[maybe_unused]] const bool kBound = bindAlgoIssue(
    arfuseAlgoTwoShot, AlgoIssue{prepareMultiRankArgs, nullptr, launchKernelArgs<launchTwoShot>, residencyTwoShot});

}  // namespace
}  // namespace arfuse
