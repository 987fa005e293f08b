#include "plan/from_topology.h"

#include <algorithm>

#include "common/log.h"
#include "device/args.h"

namespace arfuse {

Status fabricFromTopology(const topo::Topology& t, const std::vector<int>& devices, bool ncclAvailable, Fabric* out) {
  if (devices.empty() || static_cast<int>(devices.size()) > kMaxRanks)
    return ARFUSE_FAIL(arfuseInvalidArgument, "devices: %zu ranks; must be 1..%d", devices.size(), kMaxRanks);
  Fabric f;
  f.nranks = static_cast<int>(devices.size());
  int ranksPerDevice = 1, smCount = 1 << 30, minCc = 1 << 20;
  for (int d : devices) {
    if (d < 0 || d >= t.size())
      return ARFUSE_FAIL(arfuseInvalidArgument, "device %d is not in the topology (%d GPUs)", d, t.size());
    ranksPerDevice = std::max<int>(ranksPerDevice, std::count(devices.begin(), devices.end(), d));
    smCount = std::min(smCount, std::max(1, t.gpus[d].smCount));
    minCc = std::min(minCc, t.gpus[d].ccMajor * 10 + t.gpus[d].ccMinor);
  }
  // sm_90 and newer split small rows over clusters and launch with PDL (init/group_plan.cc planGroup); a
  // topology without compute capabilities (0) is planned without.
  f.clusters = minCc >= 90;
  f.pdl = f.clusters;
  f.virtualRanks = ranksPerDevice > 1;
  f.smCount = smCount;
  // One 512-thread block of the multi-rank kernels per SM (128 registers each: ptxas), divided
  // among the ranks that share a GPU, as the library derives it at init.
  f.maxBlocks = std::max(1, std::min(kMaxBlocks, smCount / ranksPerDevice));
  const topo::P2pVerdict v = topo::p2pAll(t, devices);
  f.p2p = v.ok;
  f.p2pDetail = v.reason;
  f.lowLatencyMaxBytes = (f.p2p && f.nranks > 1) ? kLowLatencyMaxBytes : 0;
  // As the library does at init: the host exchange area exists when peers cannot reach each other.
  f.hostStaged = !f.p2p && f.nranks > 1;
  f.hostStagedCapacity = f.hostStaged ? (1ll << 40) : 0;  // sized from the caller's limits at init
  if (!f.hostStaged)
    f.hostStagedDetail = f.nranks == 1 ? "a single rank needs no exchange"
                                       : "peer access works, so no host exchange area is allocated (force "
                                         "algo=hoststaged to get one)";
  if (f.nranks == 1) {
    f.nccl = false;
    f.ncclDetail = "a single rank needs no NCCL";
  } else if (f.virtualRanks) {
    f.nccl = false;
    f.ncclDetail = "NCCL needs one device per rank; this group has virtual ranks (a device repeats)";
  } else {
    f.nccl = ncclAvailable;
    f.ncclDetail = ncclAvailable ? "" : "NCCL is not available";
  }
  *out = f;
  return Status();
}

bool allPairsNvlink(const topo::Topology& t, const std::vector<int>& devices) {
  std::vector<int> unique(devices);
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  if (unique.size() < 2) return false;
  for (int a : unique)
    for (int b : unique) {
      if (a == b) continue;
      if (a < 0 || b < 0 || a >= t.size() || b >= t.size()) return false;
      const topo::Link& l = t.link(a, b);
      if (!l.nvlinks || *l.nvlinks <= 0) return false;
    }
  return true;
}

bool applyFabricDefaults(const topo::Topology& t, const std::vector<int>& devices, PlanPolicy* policy) {
  if (!allPairsNvlink(t, devices)) return false;
  policy->oneShotMaxBytes = kOneShotMaxBytesNvlink;
  policy->builtinOrigin = "built-in NVLink default, not calibrated";
  return true;
}

}  // namespace arfuse
