#include "algos/registry.h"

namespace arfuse {

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
