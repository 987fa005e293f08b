// What the paths' registry entries share (src/algos/<path>/plan.cc): the barrier paths' geometry
// and staging, the single-GPU kernel's geometry, and the reasons and refusals several paths give;
// and what their prepare steps share: the call's part of the kernels' arguments.
#pragma once

#include <string>

#include "algos/registry.h"
#include "common/params.h"

namespace arfuse {

namespace planning {
// The bytes one CTA of a call puts in its per-CTA region with geometry g, and the region's size (0:
// unchecked): each multi-rank path says, for its own buffers.
struct Region {
  long long use, cap;
};
using RegionOf = Region (*)(const PlanContext& c, const Geometry& g);
// A multi-rank path's geometry under its tile rules (Verdict::fitted) if the call's tiles fit its
// per-CTA regions; otherwise a no whose reason names the path (`name`).
Verdict tiledGeometry(const PlanContext& c, const char* name, const TileRules& rules, RegionOf region);
// The tile rules of the barrier kernels (one-shot, two-shot, host-staged: algos/barrier_launch.cuh's
// instantiations): the group's narrow CTA cap, wide tiles on the wide cap.
TileRules barrierTiles(const Fabric& f);
// The staging buffer of one-shot, two-shot (and host-staged's two-shot variant).
void stagingWorkspace(const WorkspaceInputs& in, Workspace* w);
// Host-staged: the two-shot variant, by the bytes each rank pulls over its link.
bool hostTwoShot(const Fabric& f, const PlanPolicy& policy, long long bytes);
// A forced peer-access path's refusal without peer access; "" when the group has it.
std::string needsPeerAccess(const PlanContext& c, const char* name);
// A forced peer-access path (low-latency after its own checks, one-shot, two-shot): the refusal
// without peer access, else "<name>: forced by ... (bytes, ranks)".
Verdict forcedPeerPath(const PlanContext& c, const char* name);
// The auto plan's refusal of a peer-access path in a group without peer access.
Verdict noPeerAccess(const PlanContext& c);
// detail, or a sentence when the caller recorded none.
std::string why(const std::string& detail, const char* fallback);
extern const char* const kNoP2pWhy;
extern const char* const kNoNcclWhy;
extern const char* const kNoHostWhy;
// A policy limit as text ("unlimited" for LLONG_MAX).
std::string limitText(long long v);
}  // namespace planning

// The call's part of a multi-rank kernel's arguments: the buffers, the shape, the tiling of the
// plan's geometry and the descriptor ranks compare (the group's part: init/group.h
// fillGroupKernelArgs).
inline void fillCallKernelArgs(const PrepareContext& p, KernelArgs* ka) {
  const Call& c = p.call;
  ka->pollSleepNs = static_cast<uint32_t>(paramPollSleepNs());
  ka->desc = makeCallDesc(c.op, c.dtype, p.plan.algo, p.plan.variant ? 1 : 0, c.tokens, c.hidden);
  ka->tiling = Tiling{p.plan.geo.chunks, p.plan.geo.chunkVecs, p.plan.geo.slots, c.hidden / dtypeVecElems(c.dtype)};
  ka->x = c.x;
  ka->residualIn = c.residualIn;
  ka->weight = c.weight;
  ka->normOut = c.normOut;
  ka->residualOut = c.residualOut;
  ka->tokens = c.tokens;
  ka->hidden = c.hidden;
  ka->eps = c.eps;
  ka->invHidden = 1.0f / c.hidden;
  ka->ext = c.ext;
}

// The single-GPU kernel's arguments for a call whose rows are at `x` (the local path: the caller's x;
// the NCCL path's epilogue: the all-reduce's output).
inline LocalArgs localArgsOf(const Call& c, const void* x) {
  return LocalArgs{x, c.residualIn, c.weight, c.normOut, c.residualOut, c.tokens, c.hidden, c.eps, 1.0f / c.hidden, 1,
                   0, {},           c.ext};
}

}  // namespace arfuse
