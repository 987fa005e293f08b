// The plan's decisions and reasons on recorded machines we do not have (tests/topo/fixtures).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algos/registry.h"
#include "plan/from_topology.h"
#include "topo_fixtures.h"

namespace arfuse {
namespace {

using topo::testing_fixtures::allDevices;
using topo::testing_fixtures::load;

Plan planFor(const Fabric& f, int tokens, int hidden = 7168) {
  PlanRequest r;
  r.tokens = tokens;
  r.hidden = hidden;
  return makePlan(f, Limits{}, PlanPolicy{}, r);
}

struct Expect {
  const char* fixture;
  std::vector<int> devices;  // empty: all
  bool p2p;
  arfuseAlgo_t at1, at64, at1024;  // 7168-wide bf16
  const char* reasonNeedle;        // in the 1-token reason
};

TEST(PlanOnTopology, RecordedMachines) {
  const Expect cases[] = {
      {"h200_8x_nvswitch", {}, true, arfuseAlgoLowLatency, arfuseAlgoTwoShot, arfuseAlgoTwoShot, "lowlatency"},
      {"h200_2x_nvlink", {}, true, arfuseAlgoLowLatency, arfuseAlgoOneShot, arfuseAlgoOneShot, "lowlatency"},
      // Recorded on a real 4 x H200 VM (every pair NV18, peer load/store measured on all 12 pairs).
      {"h200_4x_recorded", {}, true, arfuseAlgoLowLatency, arfuseAlgoTwoShot, arfuseAlgoTwoShot, "lowlatency"},
      {"rtxpro6000_4x_switch", {}, true, arfuseAlgoLowLatency, arfuseAlgoTwoShot, arfuseAlgoTwoShot, "lowlatency"},
      {"rtxpro6000_8x_2switch", {}, true, arfuseAlgoLowLatency, arfuseAlgoTwoShot, arfuseAlgoTwoShot, "lowlatency"},
      // A failed peer store (2 -> 5) makes the whole group fall back, and the reason names the pair.
      // Host staging serves it up to the host-staged limit (64 x 7168 x 2 B = 896 KiB), NCCL beyond.
      {"rtxpro6000_8x_2socket",
       {},
       false,
       arfuseAlgoHostStaged,
       arfuseAlgoHostStaged,
       arfuseAlgoNccl,
       "devices 2 and 5"},
      // ...but one socket's four GPUs still have working peer access.
      {"rtxpro6000_8x_2socket",
       {0, 1, 2, 3},
       true,
       arfuseAlgoLowLatency,
       arfuseAlgoTwoShot,
       arfuseAlgoTwoShot,
       "lowlatency"},
      {"rtx5090_2x_nop2p", {}, false, arfuseAlgoHostStaged, arfuseAlgoHostStaged, arfuseAlgoNccl, "no peer access"},
      {"l40s_8x_noswitch", {}, false, arfuseAlgoHostStaged, arfuseAlgoHostStaged, arfuseAlgoNccl, "no peer access"},
  };
  for (const Expect& c : cases) {
    const topo::Topology t = load(c.fixture);
    Fabric f;
    std::string err;
    ASSERT_EQ(fabricFromTopology(t, c.devices.empty() ? allDevices(t) : c.devices, true, &f).into(&err), arfuseSuccess)
        << c.fixture << err;
    EXPECT_EQ(f.p2p, c.p2p) << c.fixture << ": " << f.p2pDetail;
    const Plan p1 = planFor(f, 1), p64 = planFor(f, 64), p1024 = planFor(f, 1024);
    EXPECT_EQ(p1.algo, c.at1) << c.fixture << ": " << p1.reason;
    EXPECT_EQ(p64.algo, c.at64) << c.fixture << ": " << p64.reason;
    EXPECT_EQ(p1024.algo, c.at1024) << c.fixture << ": " << p1024.reason;
    EXPECT_NE(p1.reason.find(c.reasonNeedle), std::string::npos) << c.fixture << ": " << p1.reason;
    if (p1024.algo != arfuseAlgoNccl) EXPECT_LE(p1024.blocks, f.maxBlocks);  // nccl: the local epilogue grid
  }
}

TEST(PlanOnTopology, VirtualRanksAndBadDevices) {
  const topo::Topology t = load("h200_2x_nvlink");
  Fabric f;
  std::string err;
  ASSERT_EQ(fabricFromTopology(t, {0, 0, 1, 1}, true, &f).into(&err), arfuseSuccess) << err;
  EXPECT_TRUE(f.virtualRanks);
  EXPECT_FALSE(f.nccl);
  EXPECT_EQ(f.maxBlocks, t.gpus[0].smCount / 2);
  PlanPolicy forced;
  forced.forcedAlgo = arfuseAlgoNccl;
  forced.forcedBy = "config";
  PlanRequest r;
  r.hidden = 7168;
  const Plan p = makePlan(f, Limits{}, forced, r);
  EXPECT_EQ(p.status, arfuseUnsupported);
  EXPECT_NE(p.reason.find("one device per rank"), std::string::npos) << p.reason;
  EXPECT_NE(fabricFromTopology(t, {0, 2}, true, &f).into(&err), arfuseSuccess);
  EXPECT_NE(err.find("device 2 is not in the topology"), std::string::npos) << err;
}

// One-shot's built-in limit follows the fabric: NVLink between every pair of the group's GPUs raises
// it (measured on 4 x H200: one-shot faster than two-shot at 16 and 32 tokens of 7168 bf16, slower at
// 64), PCIe keeps the general default.
TEST(PlanOnTopology, NvlinkRaisesTheBuiltInOneShotLimit) {
  EXPECT_TRUE(allPairsNvlink(load("h200_4x_recorded"), {0, 1, 2, 3}));
  EXPECT_TRUE(allPairsNvlink(load("h200_8x_nvswitch"), allDevices(load("h200_8x_nvswitch"))));
  EXPECT_TRUE(allPairsNvlink(load("h200_2x_nvlink"), {0, 0, 1}));  // virtual ranks on NVLinked GPUs
  EXPECT_FALSE(allPairsNvlink(load("h200_2x_nvlink"), {0, 0}));    // one GPU: no pair
  EXPECT_FALSE(allPairsNvlink(load("rtxpro6000_4x_switch"), {0, 1, 2, 3}));
  EXPECT_FALSE(allPairsNvlink(load("l40s_8x_noswitch"), {0, 1}));

  const topo::Topology t = load("h200_4x_recorded");
  Fabric f;
  std::string err;
  ASSERT_EQ(fabricFromTopology(t, allDevices(t), true, &f).into(&err), arfuseSuccess) << err;
  PlanPolicy policy;
  ASSERT_TRUE(applyFabricDefaults(t, allDevices(t), &policy));
  EXPECT_EQ(policy.oneShotMaxBytes, kOneShotMaxBytesNvlink);
  auto plan = [&](const PlanPolicy& pol, int tokens) {
    PlanRequest r;
    r.tokens = tokens;
    r.hidden = 7168;
    return makePlan(f, Limits{}, pol, r);
  };
  for (int tokens : {16, 32}) {  // 0.7 and 1.4 MB of peer reads
    const Plan p = plan(policy, tokens);
    EXPECT_EQ(p.algo, arfuseAlgoOneShot) << tokens << ": " << p.reason;
    EXPECT_NE(p.reason.find("built-in NVLink default, not calibrated"), std::string::npos) << p.reason;
    EXPECT_EQ(plan(PlanPolicy{}, tokens).algo, arfuseAlgoTwoShot) << "the general default, as before";
  }
  EXPECT_EQ(plan(policy, 64).algo, arfuseAlgoTwoShot) << plan(policy, 64).reason;  // 2.8 MB

  PlanPolicy pcie;
  EXPECT_FALSE(applyFabricDefaults(load("rtxpro6000_4x_switch"), {0, 1, 2, 3}, &pcie));
  EXPECT_EQ(pcie.oneShotMaxBytes, PlanPolicy{}.oneShotMaxBytes);
  EXPECT_TRUE(pcie.builtinOrigin.empty());
}

}  // namespace
}  // namespace arfuse
