#include "algos/registry.h"

#include <array>
#include <utility>

namespace arfuse {

// Each path's entry (src/algos/<path>/plan.cc). A new path: its folder, and one line here and one in
// the list below (the build finds the folder's files by glob).
AlgoEntry localEntry();
AlgoEntry lowLatencyEntry();
AlgoEntry hostStagedEntry();
AlgoEntry ncclEntry();
AlgoEntry oneShotEntry();
AlgoEntry twoShotEntry();
AlgoEntry hierarchicalEntry();  // groups that span hosts (algos/hierarchical/plan.h)

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

// The auto plan's order: one rank stays local; the low-latency path takes the smallest messages;
// without peer access host staging, then NCCL; NCCL above a measured crossover; then one-shot, and
// two-shot for everything else. A forced algorithm is looked up here by its id.
Registry& registry() {
  static Registry r({
      localEntry(),
      lowLatencyEntry(),
      hostStagedEntry(),
      ncclEntry(),
      oneShotEntry(),
      twoShotEntry(),
      hierarchicalEntry(),
  });
  return r;
}

}  // namespace

const std::vector<AlgoEntry>& algoRegistry() { return registry().entries; }

const AlgoEntry* findAlgo(arfuseAlgo_t algo) { return registry().find(algo); }

bool bindAlgoLaunch(arfuseAlgo_t algo, Status (*launch)(const AlgoLaunch&)) {
  if (AlgoEntry* e = registry().find(algo)) e->launch = launch;
  return true;
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

}  // namespace arfuse
