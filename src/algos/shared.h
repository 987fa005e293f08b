// What the paths' registry entries share (src/algos/<path>/plan.cc): the barrier paths' geometry
// and staging, the single-GPU kernel's geometry, and the reasons and refusals several paths give.
#pragma once

#include <string>

#include "algos/registry.h"

namespace arfuse {

namespace planning {
// A multi-rank path's geometry, and whether the call's tiles fit the path's per-CTA regions.
bool barrierGeometry(const PlanContext& c, arfuseAlgo_t algo, Plan* p, std::string* why);
// The single-GPU add+RMSNorm kernel's geometry (the local path, and the NCCL path's epilogue).
bool localGeometry(const PlanContext& c, Plan* p, std::string* why);
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
// barrierGeometry for one path, as an entry's geometry.
template <arfuseAlgo_t A>
bool barrierGeometryOf(const PlanContext& c, Plan* p, std::string* why) {
  return barrierGeometry(c, A, p, why);
}
// detail, or a sentence when the caller recorded none.
std::string why(const std::string& detail, const char* fallback);
extern const char* const kNoP2pWhy;
extern const char* const kNoNcclWhy;
extern const char* const kNoHostWhy;
// A policy limit as text ("unlimited" for LLONG_MAX).
std::string limitText(long long v);
}  // namespace planning

}  // namespace arfuse
