// The oneshot path's launch, bound to its registry entry.
#include "algos/issue.h"

namespace arfuse {
namespace {

Status launch(const AlgoLaunch& c) { return kernelLaunchStatus(launchOneShot(c.l, c.ka, c.stream), c.l); }

[[maybe_unused]] const bool kBound = bindAlgoLaunch(arfuseAlgoOneShot, launch);

}  // namespace
}  // namespace arfuse
