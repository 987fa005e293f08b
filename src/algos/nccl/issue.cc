// The NCCL path's launch, bound to its registry entry: the epilogue after the all-reduce (or the
// rank-order sum of the gathered inputs). The NCCL call itself is issued by api/enqueue.cc, which
// schedules it inside arfuseGroupStart/End.
#include "algos/issue.h"

namespace arfuse {
namespace {

Status launch(const AlgoLaunch& c) { return localLaunchStatus(launchLocal(c.l, c.la, c.stream), c.l); }

[[maybe_unused]] const bool kBound = bindAlgoLaunch(arfuseAlgoNccl, launch);

}  // namespace
}  // namespace arfuse
