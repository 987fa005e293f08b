// `arfuse plan`: the library's plan for a described machine, no GPU needed. The machine is either a
// topology file or an assumed one, built as a topology too, so both go through the library's own
// rule for what a group of GPUs can do (fabricFromTopology) and the output says which it was.
#include <cstdio>
#include <string>
#include <vector>

#include "algos/hierarchical/plan.h"
#include "algos/registry.h"
#include "args.h"
#include "base/printable.h"
#include "cli.h"
#include "common/params.h"
#include "plan/from_topology.h"
#include "plan/plan.h"
#include "plan_args.h"

namespace arfuse {
namespace cli {
namespace {

constexpr int kAssumedSmCount = 132;  // an H100 / H200

// The assumed machine: `gpus` GPUs of 132 SMs with P2P between every pair (or none), no NVLink.
topo::Topology assumedMachine(int gpus, bool p2p) {
  topo::Topology t = topo::makeTopology(gpus);
  t.source = "assumed";
  for (topo::Gpu& g : t.gpus) {
    g.name = "assumed GPU";
    g.ccMajor = 9;
    g.smCount = kAssumedSmCount;
  }
  for (topo::Link& l : t.links) l.canAccessPeer = p2p;
  return t;
}

std::string bytesText(long long b) {
  if (b >= (1ll << 20) && b % (1ll << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

}  // namespace

int plan(const std::vector<std::string>& args) {
  PlanArgs a;
  std::string err;
  if (!parsePlanArgs(args, &a, &err)) {
    return usageError("plan", err);
  }
  if (a.help) {
    std::printf("%s", planUsage());
    return kExitOk;
  }
  Limits limits;
  limits.maxTokens = 1 << 20;
  limits.maxHidden = 1 << 20;
  PlanRequest req;
  req.hidden = a.hidden;
  req.dtype = a.dtype;
  if (a.allreduce) req.op = arfuseOpAllReduce;
  {
    // The shape is the same for every row: a bad one is one usage error, not one per token count.
    PlanRequest probe = req;
    probe.tokens = 1;
    const Plan shape = validateShape(limits, probe);
    if (shape.status != arfuseSuccess) {
      return usageError("plan", "--hidden/--dtype: " + shape.reason);
    }
  }
  topo::Topology t;
  std::vector<int> devices = a.devices;
  const bool assumed = a.topology.empty();
  if (assumed) {
    t = assumedMachine(a.virtualRanks ? 1 : a.ranks, !a.noP2p);
    devices.assign(a.ranks, 0);
    if (!a.virtualRanks)
      for (int r = 0; r < a.ranks; ++r) devices[r] = r;
  } else {
    if (const Status read = topo::readJsonFile(a.topology, &t); !read.ok()) {
      return usageError("plan", "--topology: " + read.message());
    }
    if (devices.empty())
      for (int d = 0; d < t.size(); ++d) devices.push_back(d);
  }
  Fabric f;
  if (const Status built = fabricFromTopology(t, devices, /*ncclAvailable=*/true, &f); !built.ok()) {
    return usageError("plan", "--devices: " + built.message());
  }
  if (assumed && a.noP2p) f.p2pDetail = "--no-p2p given";
  const ExplicitLimits explicitEnv = explicitLimitsFromEnv();
  const ResolvedPolicy resolved = planPolicy(a, t, devices, explicitEnv, paramCalibrationFile());
  const PlanPolicy& policy = resolved.policy;
  // As arfuseCommInitAll does: forcing host staging allocates the host exchange area even where peer
  // access works.
  if (policy.forcedAlgo == arfuseAlgoHostStaged && f.nranks > 1 && !f.hostStaged) {
    f.hostStaged = true;
    f.hostStagedCapacity = 1ll << 40;  // sized from the caller's limits at init
    f.hostStagedDetail.clear();
  }
  if (assumed) {
    std::string gpus = a.virtualRanks ? "1 GPU holding " + countOf(a.ranks, "virtual rank")
                                      : countOf(a.ranks, "GPU") + (a.ranks == 1 ? "" : ", one rank each");
    const char* peers = a.virtualRanks ? "ranks share the GPU's memory"
                        : a.ranks == 1 ? "no peers"
                        : a.noP2p      ? "no P2P between GPUs (--no-p2p)"
                                       : "P2P between every pair";
    std::printf("assumed machine (no --topology; nothing is probed): %s, %d SMs each, %s, no NVLink, %s\n",
                gpus.c_str(), kAssumedSmCount, peers, f.nccl ? "NCCL available" : ("no NCCL: " + f.ncclDetail).c_str());
    std::printf(
        "  (arfuse plan --topology FILE plans for a real machine; `arfuse doctor --save-topology` records one)\n");
  } else {
    std::printf("%s\n", topo::describe(t).c_str());
  }
  std::printf("ranks %d%s, peer access: %s, block cap %d, low-latency limit %s, one-shot limit %s (%s)\n\n", f.nranks,
              f.virtualRanks ? " (virtual)" : "", f.p2p ? "yes" : ("no: " + f.p2pDetail).c_str(), f.maxBlocks,
              f.lowLatencyMaxBytes > 0 ? bytesText(f.lowLatencyMaxBytes).c_str() : "none",
              bytesText(policy.oneShotMaxBytes).c_str(),
              !policy.calibratedFrom.empty()  ? policy.calibratedFrom.c_str()
              : !policy.builtinOrigin.empty() ? policy.builtinOrigin.c_str()
              : explicitEnv.oneShot           ? "ARFUSE_ONESHOT_MAX_BYTES"
                                              : "built-in default");
  for (const PolicyNote& n : resolved.notes) std::printf("policy: %s\n", printable(n.text).c_str());
  if (!resolved.notes.empty()) std::printf("\n");

  Fabric mf;  // --hosts: H hosts like this one (comm/multihost.cc builds the same from every rank)
  if (a.hosts > 0) {
    if (a.hosts * f.nranks > ARFUSE_MAX_RANKS) {
      return usageError("plan", "--hosts " + std::to_string(a.hosts) + " x " + countOf(f.nranks, "rank") +
                                    " per host is more than " + std::to_string(ARFUSE_MAX_RANKS) + " ranks");
    }
    mf.nccl = true;
    mf.hosts = a.hosts;
    mf.localRanks = f.nranks;
    mf.nranks = a.hosts * f.nranks;
    mf.hierarchical = f.p2p || f.nranks == 1;
    mf.hierarchicalDetail = f.p2p ? "" : "no peer access between the ranks of a host: " + f.p2pDetail;
    mf.maxBlocks = f.maxBlocks;
    mf.maxBlocksWide = f.maxBlocksWide > 0 ? f.maxBlocksWide : f.maxBlocks;
    mf.smCount = f.smCount;
    mf.pdl = f.pdl;
    std::printf(
        "group over %d such hosts: %d ranks, NCCL across hosts (the nccl path over every rank, the "
        "hierarchical path's all-reduce per local index)\n\n",
        a.hosts, mf.nranks);
  }
  std::printf("%-7s %-10s %-12s %-7s %-7s %s\n", "tokens", "bytes", "algo", "blocks", "threads", "reason");
  int rc = kExitOk;
  for (int tokens : a.tokens) {
    req.tokens = tokens;
    Plan p = a.hosts > 0 ? makePlan(mf, limits, policy, req) : makePlan(f, limits, policy, req);
    if (p.status != arfuseSuccess) {
      std::printf("%-7d %-10s %-12s %-7s %-7s %s: %s\n", tokens, "-", "-", "-", "-", arfuseGetErrorName(p.status),
                  p.reason.c_str());
      rc = kExitFailed;
      continue;
    }
    std::printf("%-7d %-10lld %-12s %-7d %-7d %s\n", tokens,
                static_cast<long long>(tokens) * req.hidden * dtypeSize(req.dtype), arfuseAlgoName(p.algo), p.blocks,
                p.threads, p.reason.c_str());
  }
  return rc;
}

}  // namespace cli
}  // namespace arfuse
