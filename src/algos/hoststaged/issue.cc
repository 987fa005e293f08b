// The host-staged path's launch (the one-shot or two-shot variant), bound to its registry entry.
#include "algos/issue.h"

namespace arfuse {
namespace {

Status launch(const AlgoLaunch& c) { return kernelLaunchStatus(launchHostStaged(c.l, c.variant, c.ka, c.stream), c.l); }

[[maybe_unused]] const bool kBound = bindAlgoLaunch(arfuseAlgoHostStaged, launch);

}  // namespace
}  // namespace arfuse
