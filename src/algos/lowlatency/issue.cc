// The lowlatency path's launch, bound to its registry entry.
#include "algos/issue.h"

namespace arfuse {
namespace {

Status launch(const AlgoLaunch& c) { return kernelLaunchStatus(launchLowLatency(c.l, c.variant, c.ka, c.stream), c.l); }

[[maybe_unused]] const bool kBound = bindAlgoLaunch(arfuseAlgoLowLatency, launch);

}  // namespace
}  // namespace arfuse
