// One set of init decisions for both init paths (init/group_plan.h) and one policy resolution
// (policy/resolve.h) for the library, `arfuse plan` and doctor: the same machine, environment and
// calibration file give the same Fabric, Limits, PlanPolicy and workspace whichever path creates
// the group. Machines are the topology fixtures (tests/topo/fixtures); no GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "common/params.h"
#include "init/group_plan.h"
#include "plan/calibration.h"
#include "plan/from_topology.h"
#include "plan_args.h"
#include "policy/resolve.h"
#include "topo_fixtures.h"

namespace arfuse {
namespace {

using topo::testing_fixtures::load;

// Facts of ranks on `devices` of `t` (a repeated index: ranks sharing that GPU), as each init path
// gathers them: the in-process one from cudaGetDeviceProperties of each device, the multi-process
// one from every rank's hello (the same UUID, architecture, SMs and residency per rank).
GroupFacts factsFor(const topo::Topology& t, const std::vector<int>& devices, bool multiProcess) {
  GroupFacts f;
  f.multiProcess = multiProcess;
  std::string err;
  EXPECT_EQ(resolveConfig(nullptr, static_cast<int>(devices.size()), &f.config).into(&err), arfuseSuccess) << err;
  for (int d : devices) {
    RankFacts r;
    r.uuid = t.gpus[d].uuid;
    r.arch = t.gpus[d].ccMajor * 10 + t.gpus[d].ccMinor;
    r.sms = t.gpus[d].smCount > 0 ? t.gpus[d].smCount : 132;
    r.res.lowLatency = 8;
    r.res.narrow = 8;
    r.res.wide = 4;
    for (int c = 2; c <= kMaxChunks; c *= 2) r.res.clusters[c] = r.res.llClusters[c] = r.sms / c * 2;
    f.ranks.push_back(r);
  }
  f.topology = &t;
  return f;
}

void expectSameFabric(const Fabric& a, const Fabric& b) {
  EXPECT_EQ(a.nranks, b.nranks);
  EXPECT_EQ(a.virtualRanks, b.virtualRanks);
  EXPECT_EQ(a.ncclDetail, b.ncclDetail);
  EXPECT_EQ(a.maxBlocks, b.maxBlocks);
  EXPECT_EQ(a.maxBlocksLowLatency, b.maxBlocksLowLatency);
  EXPECT_EQ(a.maxBlocksWide, b.maxBlocksWide);
  for (int c = 0; c <= kMaxChunks; ++c) {
    EXPECT_EQ(a.clusterCtas[c], b.clusterCtas[c]) << c;
    EXPECT_EQ(a.llClusterCtas[c], b.llClusterCtas[c]) << c;
  }
  EXPECT_EQ(a.smCount, b.smCount);
  EXPECT_EQ(a.lowLatencyMaxBytes, b.lowLatencyMaxBytes);
  EXPECT_EQ(a.clusters, b.clusters);
  EXPECT_EQ(a.pdl, b.pdl);
  EXPECT_EQ(a.stagingRegionBytes, b.stagingRegionBytes);
  EXPECT_EQ(a.hostRegionBytes, b.hostRegionBytes);
}

void expectSamePolicy(const PlanPolicy& a, const PlanPolicy& b) {
  EXPECT_TRUE(sameLimits(a, b)) << limitsText(a) << " vs " << limitsText(b);
  EXPECT_EQ(a.forcedAlgo, b.forcedAlgo);
  EXPECT_EQ(a.calibratedFrom, b.calibratedFrom);
  EXPECT_EQ(a.builtinOrigin, b.builtinOrigin);
  EXPECT_EQ(a.deterministic, b.deterministic);
  EXPECT_EQ(a.maxChunks, b.maxChunks);
}

void expectSamePlan(const GroupPlan& a, const GroupPlan& b) {
  EXPECT_EQ(a.status, b.status);
  expectSameFabric(a.fabric, b.fabric);
  EXPECT_EQ(a.limits.maxTokens, b.limits.maxTokens);
  EXPECT_EQ(a.limits.maxHidden, b.limits.maxHidden);
  EXPECT_EQ(a.limits.dtypeMask, b.limits.dtypeMask);
  expectSamePolicy(a.policy, b.policy);
  EXPECT_EQ(a.ws.stagingBytes, b.ws.stagingBytes);
  EXPECT_EQ(a.ws.llBytes, b.ws.llBytes);
  EXPECT_EQ(a.ws.ncclBytes, b.ws.ncclBytes);
  EXPECT_EQ(a.timeoutNs, b.timeoutNs);
  EXPECT_EQ(a.ncclPlanned, b.ncclPlanned);
}

// A calibration of `devices` of `t` in which one-shot wins up to 16 tokens of hidden 7168 bf16 and
// two-shot above (numbers invented for the test), written to a temporary file.
std::string writeCalibration(const topo::Topology& t, const std::vector<int>& devices) {
  constexpr long long kRow = 7168 * 2;
  Calibration c;
  c.created = "2026-12-01T10:00:00Z";
  c.arfuse = "arfuse test";
  c.hostname = "test";
  for (int d : devices) c.gpus.push_back(t.gpus[d].uuid);
  std::sort(c.gpus.begin(), c.gpus.end());
  c.gpus.erase(std::unique(c.gpus.begin(), c.gpus.end()), c.gpus.end());
  c.fingerprint = topo::calibrationFingerprint(t, devices);
  c.hidden = 7168;
  c.dtype = "bf16";
  CalibrationGroup g;
  g.nranks = static_cast<int>(devices.size());
  g.virtualRanks = c.gpus.size() < devices.size();
  const int tokens[] = {1, 16, 64, 1024};
  const double one[] = {7.0, 9.0, 30.0, 400.0};
  const double two[] = {9.0, 10.0, 20.0, 200.0};
  for (int i = 0; i < 4; ++i) {
    g.points.push_back({"oneshot", tokens[i], tokens[i] * kRow, one[i]});
    g.points.push_back({"twoshot", tokens[i], tokens[i] * kRow, two[i]});
  }
  g.bestUpTo = calibrationCrossovers(g.points);
  c.groups.push_back(g);
  const std::string path = ::testing::TempDir() + "arfuse_policy_test_" + std::to_string(getpid()) + "_" +
                           std::to_string(devices.size()) + ".json";
  std::ofstream(path) << calibrationToJson(c);
  return path;
}

struct Machine {
  const char* fixture;
  std::vector<int> devices;
};

const std::vector<Machine>& machines() {
  static const std::vector<Machine> m = {
      {"h200_8x_nvswitch", {0, 1, 2, 3, 4, 5, 6, 7}},
      {"h200_4x_recorded", {0, 1, 2, 3}},
      {"h200_2x_nvlink", {0, 1}},
      {"rtxpro6000_4x_switch", {0, 1, 2, 3}},
      {"rtx5090_2x_nop2p", {0, 1}},
      {"h200_1x", {0, 0, 0, 0}},  // four ranks on one GPU (virtual ranks, or four processes)
      {"h200_8x_nvswitch", {0, 0, 1, 1}},
      {"h200_8x_nvswitch", {3}},
  };
  return m;
}

TEST(GroupPlan, SameMachineGivesTheSamePlanInputsWhicheverInitPath) {
  for (const Machine& m : machines()) {
    SCOPED_TRACE(std::string(m.fixture) + " x" + std::to_string(m.devices.size()));
    const topo::Topology t = load(m.fixture);
    const std::string cal = writeCalibration(t, m.devices);
    for (int variant = 0; variant < 4; ++variant) {
      SCOPED_TRACE("variant " + std::to_string(variant));
      GroupFacts in = factsFor(t, m.devices, false), mp = factsFor(t, m.devices, true);
      for (GroupFacts* f : {&in, &mp}) {
        if (variant == 1) f->calibrationFile = cal;
        if (variant == 2) {  // an explicit ARFUSE_ONESHOT_MAX_BYTES wins over calibration and fabric
          f->calibrationFile = cal;
          f->config.policy.oneShotMaxBytes = 12345;
          f->explicitEnv.oneShot = true;
        }
        if (variant == 3) f->calibrationFile = "/nonexistent/arfuse-calibration.json";
      }
      const GroupPlan a = planGroup(in), b = planGroup(mp);
      ASSERT_EQ(a.status, arfuseSuccess) << a.error;
      expectSamePlan(a, b);
      if (variant == 1 && m.devices.size() > 1) EXPECT_EQ(a.policy.calibratedFrom, "calibration " + cal);
      if (variant == 2 && m.devices.size() > 1) EXPECT_EQ(a.policy.oneShotMaxBytes, 12345);
    }
    std::remove(cal.c_str());
  }
}

// Multi-process groups (one process per GPU, as engines run) used to keep the general defaults:
// no ARFUSE_CALIBRATION_FILE, no NVLink default, no one-GPU default.
TEST(GroupPlan, MultiProcessGroupsUseTheCalibrationAndTheFabricDefaults) {
  const topo::Topology nvswitch = load("h200_8x_nvswitch");
  const std::vector<int> eight = {0, 1, 2, 3, 4, 5, 6, 7};
  GroupFacts f = factsFor(nvswitch, eight, /*multiProcess=*/true);
  GroupPlan p = planGroup(f);
  EXPECT_EQ(p.policy.oneShotMaxBytes, kOneShotMaxBytesNvlink);
  EXPECT_EQ(p.policy.builtinOrigin, "built-in NVLink default, not calibrated");

  const std::string cal = writeCalibration(nvswitch, eight);
  f.calibrationFile = cal;
  p = planGroup(f);
  EXPECT_EQ(p.policy.calibratedFrom, "calibration " + cal);
  EXPECT_EQ(p.policy.oneShotMaxBytes, 16ll * 7168 * 2 * 7);  // one-shot's crossover x peers
  std::remove(cal.c_str());

  const topo::Topology one = load("h200_1x");
  p = planGroup(factsFor(one, {0, 0, 0, 0}, /*multiProcess=*/true));
  EXPECT_EQ(p.policy.oneShotMaxBytes, kOneShotMaxBytesOneGpu);
  EXPECT_EQ(p.policy.builtinOrigin, "built-in one-GPU default, not calibrated");
}

// A process that cannot see every GPU of its group (CUDA_VISIBLE_DEVICES = its own GPU) cannot
// check the NVLink pairs nor the calibration key: it keeps the general limits and says why.
TEST(GroupPlan, HiddenGpusKeepTheGeneralLimits) {
  const topo::Topology all = load("h200_8x_nvswitch");
  GroupFacts f = factsFor(all, {0, 1, 2, 3, 4, 5, 6, 7}, true);
  topo::Topology mine = topo::subTopology(all, {2});
  f.topology = &mine;
  f.calibrationFile = "/nonexistent/cal.json";
  const GroupPlan p = planGroup(f);
  EXPECT_EQ(p.policy.oneShotMaxBytes, PlanPolicy().oneShotMaxBytes);
  EXPECT_TRUE(p.policy.builtinOrigin.empty());
  ASSERT_FALSE(p.notes.empty());
  EXPECT_NE(p.notes[0].text.find("is not among the 1 GPUs this process sees"), std::string::npos) << p.notes[0].text;
}

TEST(ResolvePolicy, DefaultsAreWrittenOnce) {
  // PlanPolicy's initialisers and the registry's defaults are the same numbers (common/defaults.h).
  const PlanPolicy p;
  for (const ParamSpec& s : paramSpecs()) {
    const std::string name = s.name;
    if (name == "ARFUSE_ONESHOT_MAX_BYTES") EXPECT_EQ(std::stoll(s.defaultValue), p.oneShotMaxBytes);
    if (name == "ARFUSE_HOST_ONESHOT_MAX_BYTES") EXPECT_EQ(std::stoll(s.defaultValue), p.hostOneShotMaxBytes);
    if (name == "ARFUSE_HOST_STAGED_MAX_BYTES") EXPECT_EQ(std::stoll(s.defaultValue), p.hostStagedMaxBytes);
  }
}

// `arfuse plan` resolves its policy with the library's function: for the same machine, environment
// and calibration file it prints the limits an arfuseCommInitAll group there would plan with.
TEST(PlanCommand, ResolvesTheSamePolicyAsTheLibrary) {
  for (const Machine& m : machines()) {
    SCOPED_TRACE(std::string(m.fixture) + " x" + std::to_string(m.devices.size()));
    const topo::Topology t = load(m.fixture);
    const std::string cal = writeCalibration(t, m.devices);
    for (const std::string& file : {std::string(), cal}) {
      GroupFacts f = factsFor(t, m.devices, false);
      f.calibrationFile = file;
      const GroupPlan lib = planGroup(f);
      cli::PlanArgs a;
      a.ranks = static_cast<int>(m.devices.size());
      const ResolvedPolicy cli = cli::planPolicy(a, t, m.devices, ExplicitLimits{}, file);
      expectSamePolicy(lib.policy, cli.policy);
    }
    std::remove(cal.c_str());
  }
  // --algo wins over ARFUSE_ALGO, as a config's algo does in the library.
  const topo::Topology t = load("h200_2x_nvlink");
  cli::PlanArgs a;
  a.algo = arfuseAlgoTwoShot;
  const ResolvedPolicy r = cli::planPolicy(a, t, {0, 1}, ExplicitLimits{}, "");
  EXPECT_EQ(r.policy.forcedAlgo, arfuseAlgoTwoShot);
  EXPECT_EQ(r.policy.forcedBy, "--algo");
}

}  // namespace
}  // namespace arfuse
