// The algorithm registry: one entry per path, in the order the auto plan tries them. An entry says
// whether its path can take a call (and why, or why not), how the call is cut (its geometry), what
// the path adds to each rank's workspace, and how the call is launched. makePlan (plan/plan.cc)
// walks the entries; workspaceFor adds their contributions; enqueue (api/enqueue.cc) launches
// through the entry of the planned algorithm.
//
// A path lives in src/algos/<path>/: kernel.cuh (its kernel), launch.cu (its instantiations),
// plan.cc (its entry: canImplement, geometry, workspace; pure C++, CPU-tested) and issue.cc (its
// launch, bound to the entry when the library loads). Adding one is that folder plus one line in
// registry.cc; tests/cpu/registry_test.cc adds a dummy path to show it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "algos/hierarchical/args.h"
#include "algos/launch.h"
#include "arfuse/arfuse.h"
#include "core/status.h"
#include "plan/plan.h"

namespace arfuse {

// One call as every entry sees it, with what makePlan derives from it once.
struct PlanContext {
  const Fabric& f;
  const Limits& limits;
  const PlanPolicy& policy;
  const PlanRequest& req;
  bool forced;           // the caller forced this path: canImplement answers for the forced call
  long long bytes;       // the message, per rank
  const char* op;        // "allreduce" or "allreduce+add+rmsnorm", for the reasons
  const char* forcedBy;  // who forced it ("config", "ARFUSE_ALGO", "the caller")
  const char* origin;    // where the limits came from, for the reasons
  bool calibrated;       // the limits are a calibration's
  // The auto plan: why the entry asked before this one declined the call ("" for the first), so
  // that a fallback can say it (nccl across hosts names why the hierarchical path did not serve).
  const std::string* declined = nullptr;
  // A group that spans hosts (Fabric::hosts > 1): only the entries that cross hosts are asked.
  bool acrossHosts() const { return f.hosts > 1; }
};

// canImplement's answer: ok with the plan's reason, or the reason the path cannot take the call
// (for a forced call, the refusal the caller reads, with its code). An entry that had to compute
// the call's geometry to decide hands it back with its yes (hasGeometry: blocks, threads, geo, pdl,
// variant, as its geometry function would set them), and makePlan uses it instead of asking again.
struct Verdict {
  bool ok = false;
  std::string reason;
  arfuseResult_t code = arfuseUnsupported;
  bool hasGeometry = false;
  Plan geometry;
  static Verdict yes(std::string why) { return Verdict{true, std::move(why), arfuseSuccess}; }
  static Verdict yes(std::string why, const Plan& geometry) {
    return Verdict{true, std::move(why), arfuseSuccess, true, geometry};
  }
  static Verdict no(std::string why, arfuseResult_t code = arfuseUnsupported) {
    return Verdict{false, std::move(why), code};
  }
};

// What sizes a group's workspace (workspaceFor), with the common row sizes already in `w`.
struct WorkspaceInputs {
  const Limits& limits;
  int nranks;
  size_t ctas;    // CTA regions (the most CTAs a barrier path launches)
  size_t fewest;  // the fewest CTAs a full-size call may be spread over
  long long hostMessageBytes;
  bool deterministic;
};

// What a path's launch reads: the instantiation and geometry, the arguments of the path's kernel
// (ka for the multi-rank kernels, la for the single-GPU add+RMSNorm, hier for the hierarchical
// path's three steps) and the stream. A planned call (api/enqueue.h PlannedCall) holds one, filled
// once by the planning in api.cc, and enqueue hands it to the entry as it is.
struct AlgoLaunch {
  Launch l;
  KernelArgs ka{};    // one-shot, two-shot, low-latency, host-staged, hierarchical (intra-host)
  LocalArgs la{};     // local path, and the NCCL path's epilogue (la.x = the all-reduce's output)
  HierLaunch hier{};  // hierarchical path (algos/hierarchical/args.h)
  bool fused = false;
  bool variant = false;  // Plan.variant: host-staged two-shot, low-latency two-phase
  // The local path's plain all-reduce: out = in (nothing when in place)
  const void* copySrc = nullptr;
  void* copyDst = nullptr;
  size_t copyBytes = 0;
  cudaStream_t stream = nullptr;
};

struct AlgoEntry {
  arfuseAlgo_t algo = arfuseAlgoAuto;
  const char* name = "";
  Verdict (*canImplement)(const PlanContext& c) = nullptr;
  // Sets p's blocks, threads, geometry and PDL (and variant); false with *why if no instantiation
  // or region covers the call.
  bool (*geometry)(const PlanContext& c, Plan* p, std::string* why) = nullptr;
  // Adds the path's buffers to the per-rank workspace (nullptr: none).
  void (*workspace)(const WorkspaceInputs& in, Workspace* w) = nullptr;
  // Launches the call (bound by the library: issue.cc of the path; nullptr in pure builds).
  Status (*launch)(const AlgoLaunch& call) = nullptr;
  // The path serves groups that span hosts (Fabric::hosts > 1): the plan of such a group asks only
  // these entries, and refuses any other forced one.
  bool acrossHosts = false;
};

// The ids a path may have: the values arfuseAlgo_t can hold (its enumerators fit 4 bits).
constexpr int kAlgoIds = 16;
static_assert(arfuseNumAlgos <= kAlgoIds, "the lookup table must cover every arfuseAlgo_t");

// The entries in plan order: the one list of paths.
const std::vector<AlgoEntry>& algoRegistry();
// The entry of `algo`, or nullptr: a table indexed by the id, built from the list (every launch
// looks its path up here).
const AlgoEntry* findAlgo(arfuseAlgo_t algo);
// Binds a path's launch to its entry (issue.cc, at library load). Returns true (for a static).
bool bindAlgoLaunch(arfuseAlgo_t algo, Status (*launch)(const AlgoLaunch&));
// A path added to the list before the entry of `before` (at the end if none), and removed again: for
// tests (tests/cpu/registry_test.cc), not thread-safe. addAlgo is false if the id is out of range
// (0..kAlgoIds-1) or taken.
bool addAlgo(const AlgoEntry& e, arfuseAlgo_t before);
void removeAlgo(arfuseAlgo_t algo);

// The plan: the first entry (in list order) whose canImplement takes the call, with its reason and
// geometry; a forced algorithm's entry, or its refusal. Pure: the same function answers
// arfuseCommQueryPlan, `arfuse plan` and every collective call, so the reason printed is the one acted on.
Plan makePlan(const Fabric& fabric, const Limits& limits, const PlanPolicy& policy, const PlanRequest& req);

// deterministic: the NCCL path gathers every rank's input (nranks messages) instead of summing.
// maxBlocks: CTA regions (the most CTAs a barrier path launches); fewestCtas (<= maxBlocks, -1: the
// same): the fewest CTAs a full-size call may be spread over, which sizes each region.
Workspace workspaceFor(const Limits& limits, int nranks, int maxBlocks, long long hostMessageBytes,
                       bool deterministic = false, int fewestCtas = -1);
// The same from a group's fabric (its per-class CTA caps).
Workspace workspaceFor(const Limits& limits, const Fabric& f, long long hostMessageBytes, bool deterministic);

}  // namespace arfuse
