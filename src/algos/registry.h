// The algorithm registry: one entry per path, in the order the auto plan tries them. An entry says
// whether its path can take a call (and why, or why not), how the call is cut (its geometry), what
// the path adds to each rank's workspace, and how the library issues the call: the path's prepare
// step builds its own arguments from the planned call, then its steps (an NCCL step, its kernels)
// read them. makePlan (below) walks the entries; workspaceFor adds their contributions; api/api.cc
// prepares and api/enqueue.cc issues through the entry of the planned algorithm, with no code of any
// one path.
//
// A path lives in src/algos/<path>/: kernel.cuh (its kernel), launch.cu (its instantiations),
// plan.cc (its entry: canImplement, geometry, workspace; pure C++, CPU-tested) and issue.cc (its
// prepare step and launch, bound to the entry when the library loads). Adding one is that folder
// plus one line in algos/paths.def; tests/cpu/dummy_path_test.cc builds a dummy path that way and
// shows the plan, `arfuse plan`, the CLI and the Python names see it.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "algos/launch.h"
#include "arfuse/arfuse.h"
#include "base/status.h"
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
  // A geometry function's yes: the geometry, no reason of its own.
  static Verdict fitted(const Plan& geometry) { return yes(std::string(), geometry); }
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

struct Group;  // init/group.h: what the call's path reads of the group it runs on

// One checked call, as its path prepares it: the C ABI's arguments after every check (api/api.cc),
// the extended epilogue's outputs already in place of the plain ones.
struct Call {
  arfuseOp_t op = arfuseOpAllReduceAddRmsNorm;
  arfuseDataType_t dtype = arfuseBfloat16;
  int tokens = 0, hidden = 0;
  float eps = 0.f;
  const void* x = nullptr;  // AllReduce: in
  const void* residualIn = nullptr;
  const void* weight = nullptr;
  void* normOut = nullptr;
  void* residualOut = nullptr;  // AllReduce: out
  bool fused = false;           // AllReduceAddRmsNorm, or the extended epilogue
  bool extended = false;        // arfuseAllReduceEpilogue: `ext` holds its kernel options
  EpiArgs ext{};
};

// What a path's prepare step is given: the group (nullptr for arfuseAddRmsNorm, which has none:
// only the local path runs it), the local rank, the plan and the call.
struct PrepareContext {
  const Group* g;
  int rank;
  const Plan& plan;
  const Call& call;
};

// Bytes a path's own arguments may take in an AlgoLaunch (the hierarchical path's are the largest).
constexpr size_t kAlgoArgsBytes = 1536;

// A prepared call, as its path's steps read it: the kernel's instantiation and geometry (the plan's,
// which prepare may adjust), the stream, which steps it has, and the path's own arguments, which only
// that path's prepare writes and its steps read (args<T>(): T is the path's, trivially copyable; a
// planned call is copied when arfuseGroupStart/End holds it back).
struct AlgoLaunch {
  Launch l;
  bool variant = false;  // Plan.variant: host-staged two-shot, low-latency two-phase
  cudaStream_t stream = nullptr;
  bool collective = false;  // an NCCL step first (AlgoIssue::collective: inside arfuseGroupStart/End, in a wave)
  bool kernels = true;      // then the path's kernels (AlgoIssue::launch)

  template <typename T>
  T& args() {
    static_assert(sizeof(T) <= kAlgoArgsBytes && alignof(T) <= 16, "a path's arguments must fit kAlgoArgsBytes");
    static_assert(std::is_trivially_copyable<T>::value, "a path's arguments are copied as bytes");
    return *reinterpret_cast<T*>(args_);
  }
  template <typename T>
  const T& args() const {
    return const_cast<AlgoLaunch*>(this)->args<T>();
  }

 private:
  alignas(16) unsigned char args_[kAlgoArgsBytes];
};

// How the library issues a path's calls (bound by the path's issue.cc when the library loads;
// absent in the pure builds, which only plan).
struct AlgoIssue {
  // Builds the path's arguments from the planned call, and says which steps the call has.
  Status (*prepare)(const PrepareContext& p, AlgoLaunch* out) = nullptr;
  // The NCCL step (nullptr: none): issued before the kernels; inside arfuseGroupStart/End within an
  // NCCL group of its wave (`grouped`; api/group_schedule.h).
  Status (*collective)(const AlgoLaunch& call, bool grouped) = nullptr;
  // The kernels (or copies) of the call.
  Status (*launch)(const AlgoLaunch& call) = nullptr;
  // Mins the path's kernels' residency into *r (algos/launch.h measureResidency; nullptr: none that
  // must be co-resident).
  void (*residency)(Residency* r) = nullptr;
  // Why the path's calls cannot be made inside arfuseGroupStart/End (nullptr: they can).
  const char* notInGroups = nullptr;
};

// A path's names exist here only: `name` is what users type and read (arfuseAlgoName, ARFUSE_ALGO,
// --algo, the plan's reasons, the log lines' path=), `enumName` the CamelCase of its arfuseAlgo_t
// enumerator (arfuseAlgo<enumName>, checked against include/arfuse/arfuse.h for the public ids) and
// of its member of python/arfuse/_types.py's Algo (generated from the registry: pythonAlgoMembers).
struct AlgoEntry {
  arfuseAlgo_t algo = arfuseAlgoAuto;
  const char* name = "";
  const char* enumName = "";
  Verdict (*canImplement)(const PlanContext& c) = nullptr;
  // The call's geometry on this path: Verdict::fitted with a plan whose blocks, threads, geometry and
  // PDL (and variant) are set, or a no saying why no instantiation or region covers the call. The
  // reason is data, not an error (no Status): the plan decides what it means, a forced path's
  // refusal, a decline inside canImplement, or a bug the auto plan reports.
  Verdict (*geometry)(const PlanContext& c) = nullptr;
  // Adds the path's buffers to the per-rank workspace (nullptr: none).
  void (*workspace)(const WorkspaceInputs& in, Workspace* w) = nullptr;
  // How the library issues the path's calls (bound by issue.cc of the path; empty in pure builds).
  AlgoIssue issue;
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
// Binds a path's issue steps to its entry (issue.cc, at library load). Returns true (for a static).
bool bindAlgoIssue(arfuseAlgo_t algo, const AlgoIssue& issue);
// Names. The name of algorithm `id` (arfuseAlgoName: "auto" for arfuseAlgoAuto, "unknown" if no path
// has the id).
const char* algoName(int id);
// The arfuseAlgo_t of "auto" or of a path's name; -1 if none.
int parseAlgoName(const std::string& name);
// "auto, local, lowlatency, ... or twoshot": every name parseAlgoName takes, in plan order, `sep`
// between them and `last` before the last ("|", "|" for "auto|local|...").
std::string algoNamesText(const char* sep = ", ", const char* last = " or ");
// The members of python/arfuse/_types.py's Algo, one "    <enumName> = <id>" line each (with Auto),
// by id: the Python side's names, generated from this list (tests/cpu keeps the file equal to it).
std::string pythonAlgoMembers();

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
