#include "algos/registry.h"

#include <algorithm>
#include <array>
#include <utility>

#include "algos/shared.h"
#include "common/enum_arg.h"
#include "common/log.h"
#include "device/args.h"

namespace arfuse {

// Each path's entry function (src/algos/<path>/plan.cc), from the list of paths (algos/paths.def).
// ARFUSE_PATHS_LIST names another list only for tests/cpu/dummy_path_test.cc, which builds this file
// over the list with one line more.
#ifndef ARFUSE_PATHS_LIST
#define ARFUSE_PATHS_LIST "algos/paths.def"
#endif
#define ARFUSE_PATH(make) AlgoEntry make();
#include ARFUSE_PATHS_LIST
#undef ARFUSE_PATH

namespace {

// The list, and the position of each id's entry in it (-1: none), rebuilt whenever the list changes.
struct Registry {
  std::vector<AlgoEntry> entries;
  std::array<int, kAlgoIds> index;
  explicit Registry(std::vector<AlgoEntry> e) : entries(std::move(e)) { reindex(); }
  void reindex() {
    index.fill(-1);
    for (size_t i = 0; i < entries.size(); ++i) index[static_cast<size_t>(entries[i].algo)] = static_cast<int>(i);
  }
  AlgoEntry* find(arfuseAlgo_t algo) {
    const unsigned id = static_cast<unsigned>(algo);
    if (id >= static_cast<unsigned>(kAlgoIds) || index[id] < 0) return nullptr;
    return &entries[static_cast<size_t>(index[id])];
  }
};

// The entries in the list's order (algos/paths.def says why it is that order). A forced algorithm
// is looked up here by its id.
Registry& registry() {
  static Registry r({
#define ARFUSE_PATH(make) make(),
#include ARFUSE_PATHS_LIST
#undef ARFUSE_PATH
  });
  return r;
}

}  // namespace

const std::vector<AlgoEntry>& algoRegistry() { return registry().entries; }

const AlgoEntry* findAlgo(arfuseAlgo_t algo) { return registry().find(algo); }

bool bindAlgoIssue(arfuseAlgo_t algo, const AlgoIssue& issue) {
  if (AlgoEntry* e = registry().find(algo)) e->issue = issue;
  return true;
}

const char* algoName(int id) {
  if (id == arfuseAlgoAuto) return "auto";
  if (id < 0 || id >= kAlgoIds) return "unknown";
  const AlgoEntry* e = registry().find(arfuseAlgo_t(id));
  return e ? e->name : "unknown";
}

int parseAlgoName(const std::string& name) {
  if (name == "auto") return arfuseAlgoAuto;
  for (const AlgoEntry& e : algoRegistry())
    if (name == e.name) return e.algo;
  return -1;
}

std::string algoNamesText(const char* sep, const char* last) {
  std::string s = "auto";
  const std::vector<AlgoEntry>& all = algoRegistry();
  for (size_t i = 0; i < all.size(); ++i) s += std::string(i + 1 == all.size() ? last : sep) + all[i].name;
  return s;
}

std::string pythonAlgoMembers() {
  std::string s = "    Auto = 0\n";
  for (int id = 1; id < kAlgoIds; ++id)
    if (const AlgoEntry* e = findAlgo(arfuseAlgo_t(id))) s += strprintf("    %s = %d\n", e->enumName, id);
  return s;
}

bool addAlgo(const AlgoEntry& e, arfuseAlgo_t before) {
  Registry& r = registry();
  if (static_cast<unsigned>(e.algo) >= static_cast<unsigned>(kAlgoIds) || r.find(e.algo)) return false;
  const AlgoEntry* at = r.find(before);
  r.entries.insert(at ? r.entries.begin() + (at - r.entries.data()) : r.entries.end(), e);
  r.reindex();
  return true;
}

void removeAlgo(arfuseAlgo_t algo) {
  Registry& r = registry();
  if (const AlgoEntry* at = r.find(algo)) r.entries.erase(r.entries.begin() + (at - r.entries.data()));
  r.reindex();
}

Workspace workspaceFor(const Limits& limits, const Fabric& f, long long hostMessageBytes, bool deterministic) {
  // Regions for every CTA index a barrier path launches; each large enough for the call spread over
  // the fewest CTAs a path may use (the wide 512-thread CTAs' cap can be the smaller one).
  const int wide = f.maxBlocksWide < 0 ? f.maxBlocks : f.maxBlocksWide;
  return workspaceFor(limits, f.nranks, std::max(f.maxBlocks, wide), hostMessageBytes, deterministic,
                      std::min(f.maxBlocks, wide));
}

Workspace workspaceFor(const Limits& limits, int nranks, int maxBlocks, long long hostMessageBytes, bool deterministic,
                       int fewestCtas) {
  Workspace w;
  w.elemBytes = (limits.dtypeMask & ARFUSE_DTYPE_BIT(arfuseFloat32)) ? 4 : 2;
  w.maxRowBytes = static_cast<size_t>(limits.maxHidden) * w.elemBytes;
  const size_t ctas = static_cast<size_t>(std::max(1, std::min(maxBlocks, kMaxCtas)));
  const size_t fewest = fewestCtas > 0 ? std::min(ctas, static_cast<size_t>(fewestCtas)) : ctas;
  const WorkspaceInputs in{limits, nranks, ctas, fewest, hostMessageBytes, deterministic};
  for (const AlgoEntry& e : algoRegistry())
    if (e.workspace) e.workspace(in, &w);
  return w;
}

namespace {

// The call's geometry on entry e: the one its canImplement computed, else its geometry function's
// (a no with the reason if nothing covers the call).
Verdict geometryOf(const AlgoEntry& e, const PlanContext& c, const Verdict& v) {
  return v.hasGeometry ? Verdict::fitted(v.geometry) : e.geometry(c);
}

// "2 hosts x 4 ranks": the shape of a group that spans hosts, as its reasons name it.
std::string hostsShape(const Fabric& f) { return strprintf("%d hosts x %d ranks", f.hosts, f.localRanks); }

// The entry the caller forced, or the refusal.
Plan planForced(const AlgoEntry* e, const PlanContext& c) {
  if (c.f.hosts > 1 && (!e || !e->acrossHosts))
    return failedPlan(
        arfuseUnsupported,
        strprintf("algo=%s (forced by %s) runs within one host; this group spans %s: use auto, nccl or "
                  "hierarchical",
                  arfuseAlgoName(arfuseAlgo_t(c.policy.forcedAlgo)), c.forcedBy, hostsShape(c.f).c_str()));
  if (!e)
    return failedPlan(arfuseInvalidArgument,
                      strprintf("algo=%d (forced by %s): not an algorithm for %d ranks; use %s", c.policy.forcedAlgo,
                                c.forcedBy, c.f.nranks, algoNamesText().c_str()));
  const Verdict v = e->canImplement(c);
  if (!v.ok) return failedPlan(v.code, v.reason);
  const Verdict g = geometryOf(*e, c, v);
  if (!g.ok)
    return failedPlan(arfuseUnsupported,
                      strprintf("algo=%s (forced by %s): %s; use auto", e->name, c.forcedBy, g.reason.c_str()));
  Plan p = g.geometry;
  p.algo = e->algo;
  p.reason = v.reason;
  return p;
}

// The first entry that takes the call (of a group that spans hosts: the first of those that cross
// hosts); each is told why the one asked before it declined (PlanContext::declined).
Plan planAuto(const PlanContext& c) {
  const Fabric& f = c.f;
  std::string declined;
  PlanContext ask = c;
  ask.declined = &declined;
  for (const AlgoEntry& e : algoRegistry()) {
    if (f.hosts > 1 && !e.acrossHosts) continue;
    const Verdict v = e.canImplement(ask);
    if (!v.ok) {
      declined = v.reason;
      continue;
    }
    const Verdict g = geometryOf(e, c, v);
    if (g.ok) {
      Plan p = g.geometry;
      p.algo = e.algo;
      p.reason = v.reason;
      return p;
    }
    // A path's regions hold any call the communicator accepts; reaching this is a bug, which
    // NCCL, the always-correct fallback, serves when it exists.
    const AlgoEntry* nccl = findAlgo(arfuseAlgoNccl);
    if (!f.nccl || !nccl) return failedPlan(arfuseInternalError, g.reason);
    Plan p = nccl->geometry(c).geometry;  // the single-GPU epilogue's geometry always fits
    p.algo = arfuseAlgoNccl;
    p.reason = "nccl: " + g.reason;
    return p;
  }
  return failedPlan(arfuseUnsupported, strprintf("no path: peer access is missing (%s), NCCL is unavailable (%s) "
                                                 "and host staging is unavailable (%s)",
                                                 planning::why(f.p2pDetail, planning::kNoP2pWhy).c_str(),
                                                 planning::why(f.ncclDetail, planning::kNoNcclWhy).c_str(),
                                                 planning::why(f.hostStagedDetail, planning::kNoHostWhy).c_str()));
}

}  // namespace

Plan makePlan(const Fabric& f, const Limits& limits, const PlanPolicy& policy, const PlanRequest& req) {
  Plan p = validateShape(limits, req);
  if (p.status != arfuseSuccess) return p;

  const long long bytes = static_cast<long long>(req.tokens) * req.hidden * dtypeSize(req.dtype);
  const std::string forcedBy = planning::why(policy.forcedBy, "the caller");
  if (f.nranks == 1 && policy.forcedAlgo != arfuseAlgoAuto && policy.forcedAlgo != arfuseAlgoLocal)
    return failedPlan(arfuseUnsupported, strprintf("algo=%s (forced by %s) needs >= 2 ranks; this communicator has 1",
                                                   arfuseAlgoName(arfuseAlgo_t(policy.forcedAlgo)), forcedBy.c_str()));
  const bool calibrated = !policy.calibratedFrom.empty();
  const char* origin = calibrated                      ? policy.calibratedFrom.c_str()
                       : !policy.builtinOrigin.empty() ? policy.builtinOrigin.c_str()
                                                       : "built-in default, not calibrated";
  // One rank is always local, forced or not.
  const bool forced = policy.forcedAlgo != arfuseAlgoAuto && f.nranks > 1;
  const PlanContext c{f,
                      limits,
                      policy,
                      req,
                      forced,
                      bytes,
                      req.op == arfuseOpAllReduce ? "allreduce" : "allreduce+add+rmsnorm",
                      forcedBy.c_str(),
                      origin,
                      calibrated};
  return forced ? planForced(findAlgo(arfuseAlgo_t(policy.forcedAlgo)), c) : planAuto(c);
}

}  // namespace arfuse

// The C ABI's name of an algorithm: the registry's (a C caller may pass any int: read raw).
extern "C" const char* arfuseAlgoName(arfuseAlgo_t a) { return arfuse::algoName(arfuse::rawEnum(a)); }
