// The low-latency path's steps, bound to its registry entry: the kernel's arguments, its launch (the two-phase variant
// when the plan says so) and residency.
#include "algos/issue.h"

#include "algos/lowlatency/launch.h"
#include "init/group.h"

namespace arfuse {
namespace {

[[maybe_unused]] const bool kBound =
    bindAlgoIssue(arfuseAlgoLowLatency,
                  AlgoIssue{prepareMultiRankArgs, nullptr, launchKernelVariant<launchLowLatency>, residencyLowLatency});

}  // namespace
}  // namespace arfuse
