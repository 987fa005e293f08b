// The one-shot path's steps, bound to its registry entry: the multi-rank kernel's arguments (the group's and the
// call's), its launch and residency.
#include "algos/issue.h"

#include "algos/oneshot/launch.h"
#include "init/group.h"

namespace arfuse {
namespace {

[[maybe_unused]] const bool kBound = bindAlgoIssue(
    arfuseAlgoOneShot, AlgoIssue{prepareMultiRankArgs, nullptr, launchKernelArgs<launchOneShot>, residencyOneShot});

}  // namespace
}  // namespace arfuse
