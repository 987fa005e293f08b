#include "algos/registry.h"

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

// The auto plan's order: one rank stays local; the low-latency path takes the smallest messages;
// without peer access host staging, then NCCL; NCCL above a measured crossover; then one-shot, and
// two-shot for everything else. A forced algorithm is looked up here by its id.
std::vector<AlgoEntry>& algoRegistry() {
  static std::vector<AlgoEntry> entries = {
      localEntry(),   lowLatencyEntry(), hostStagedEntry(),   ncclEntry(),
      oneShotEntry(), twoShotEntry(),    hierarchicalEntry(),
  };
  return entries;
}

const AlgoEntry* findAlgo(arfuseAlgo_t algo) {
  for (const AlgoEntry& e : algoRegistry())
    if (e.algo == algo) return &e;
  return nullptr;
}

bool bindAlgoLaunch(arfuseAlgo_t algo, Status (*launch)(const AlgoLaunch&)) {
  for (AlgoEntry& e : algoRegistry())
    if (e.algo == algo) e.launch = launch;
  return true;
}

}  // namespace arfuse
