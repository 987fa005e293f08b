// Calibration files: crossovers from measurements, the JSON form, matching a group (UUIDs,
// fingerprint, rank count), and the plan's decisions and reasons under a calibrated policy.
#include "plan/calibration.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstdio>
#include <fstream>

#include "algos/registry.h"
#include "plan/from_topology.h"
#include "plan/plan.h"
#include "topo/topology.h"
#include "topo_fixtures.h"

namespace arfuse {
namespace {

using topo::testing_fixtures::allDevices;
using topo::testing_fixtures::load;

constexpr long long kRow = 7168 * 2;  // one bf16 token of hidden 7168

std::vector<std::string> uuidsOf(const topo::Topology& t, const std::vector<int>& devices) {
  std::vector<std::string> u;
  for (int d : devices) u.push_back(t.gpus[d].uuid);
  return u;
}

// The plan of a bf16 call of `tokens` rows of hidden 7168 under `policy`.
Plan planAt(const Fabric& f, const PlanPolicy& policy, int tokens) {
  PlanRequest r;
  r.tokens = tokens;
  r.hidden = 7168;
  return makePlan(f, Limits{}, policy, r);
}

void add(CalibrationGroup* g, const std::string& algo, int tokens, double us) {
  g->points.push_back({algo, tokens, tokens * kRow, us});
}

// A synthetic 8-rank sweep shaped like an NVSwitch machine's (numbers invented for the test):
// low-latency wins up to 4 tokens, one-shot at 8-16, two-shot at 32-1024, NCCL at 2048.
Calibration eightRanks(const topo::Topology& t) {
  Calibration c;
  c.created = "2026-11-30T10:00:00Z";
  c.arfuse = "arfuse 0.1.0 cuda 13.0 nccl 2.28.9 archs 90";
  c.hostname = "hgx-h200-a";
  c.gpus = uuidsOf(t, allDevices(t));
  std::sort(c.gpus.begin(), c.gpus.end());
  c.fingerprint = topo::calibrationFingerprint(t, allDevices(t));
  c.hidden = 7168;
  c.dtype = "bf16";
  CalibrationGroup g;
  g.nranks = 8;
  const int tokens[] = {1, 2, 4, 8, 16, 32, 64, 256, 1024, 2048};
  const double ll[] = {5.0, 5.5, 6.2};
  const double one[] = {7.0, 7.3, 7.9, 8.8, 10.5, 15.0, 24.0, 80.0, 300.0, 610.0};
  const double two[] = {9.0, 9.2, 9.6, 10.1, 11.0, 13.0, 18.0, 45.0, 160.0, 330.0};
  const double nccl[] = {16.0, 16.2, 16.5, 17.0, 17.5, 19.0, 22.0, 50.0, 170.0, 320.0};
  for (int i = 0; i < 10; ++i) {
    if (i < 3) add(&g, "lowlatency", tokens[i], ll[i]);
    add(&g, "oneshot", tokens[i], one[i]);
    add(&g, "twoshot", tokens[i], two[i]);
    add(&g, "nccl", tokens[i], nccl[i]);
  }
  g.notes = {"hoststaged: not eligible: peer access works, so no host exchange area is allocated"};
  c.groups.push_back(g);
  return c;
}

TEST(Calibration, CrossoversAreTheLargestSizeEachPathWon) {
  const topo::Topology t = load("h200_8x_nvswitch");
  const auto x = calibrationCrossovers(eightRanks(t).groups[0].points);
  const std::vector<std::pair<std::string, long long>> want = {
      {"lowlatency", 4 * kRow}, {"oneshot", 16 * kRow}, {"twoshot", 1024 * kRow}, {"nccl", 2048 * kRow}};
  EXPECT_EQ(x, want);
  // Ties go to the earlier path in plan order; a path never fastest is absent.
  std::vector<CalibrationPoint> tie = {{"twoshot", 1, kRow, 5.0}, {"oneshot", 1, kRow, 5.0}, {"nccl", 1, kRow, 9.0}};
  EXPECT_EQ(calibrationCrossovers(tie), (std::vector<std::pair<std::string, long long>>{{"oneshot", kRow}}));
  EXPECT_TRUE(calibrationCrossovers({}).empty());
}

TEST(Calibration, JsonRoundTripIsExactAndStable) {
  const Calibration c = eightRanks(load("h200_8x_nvswitch"));
  const std::string js = calibrationToJson(c);
  EXPECT_NE(js.find("\"schema\": \"arfuse-calibration/1\""), std::string::npos) << js;
  EXPECT_NE(js.find("\"best_up_to_bytes\": {\"lowlatency\": 57344, \"oneshot\": 229376, \"twoshot\": 14680064, "
                    "\"nccl\": 29360128}"),
            std::string::npos)
      << js;
  EXPECT_NE(js.find("{\"algo\": \"lowlatency\", \"tokens\": 1, \"bytes\": 14336, \"us\": 5}"), std::string::npos) << js;
  Calibration back;
  std::string err;
  ASSERT_EQ(calibrationFromJson(js, &back).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(back.gpus, c.gpus);
  EXPECT_EQ(back.fingerprint, c.fingerprint);
  ASSERT_EQ(back.groups.size(), 1u);
  EXPECT_EQ(back.groups[0].points.size(), c.groups[0].points.size());
  EXPECT_EQ(back.groups[0].points[5].us, c.groups[0].points[5].us);
  EXPECT_EQ(back.groups[0].notes, c.groups[0].notes);
  EXPECT_EQ(back.groups[0].bestUpTo, calibrationCrossovers(c.groups[0].points));
  EXPECT_EQ(calibrationToJson(back), js);
  // An empty group list and a group without notes or points still round-trip.
  Calibration e = c;
  e.groups.clear();
  ASSERT_EQ(calibrationFromJson(calibrationToJson(e), &back).into(&err), arfuseSuccess) << err;
  EXPECT_TRUE(back.groups.empty());
}

std::string readError(const std::string& text) {
  Calibration c;
  std::string err;
  EXPECT_NE(calibrationFromJson(text, &c).into(&err), arfuseSuccess) << text;
  return err;
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const size_t p = s.find(from);
  EXPECT_NE(p, std::string::npos) << from;
  if (p != std::string::npos) s.replace(p, from.size(), to);
  return s;
}

TEST(Calibration, ReaderIsStrict) {
  const std::string js = calibrationToJson(eightRanks(load("h200_8x_nvswitch")));
  EXPECT_EQ(readError(replaced(js, "arfuse-calibration/1", "arfuse-calibration/2")),
            "schema at 2:13: unsupported schema \"arfuse-calibration/2\" (this reader understands "
            "\"arfuse-calibration/1\")");
  EXPECT_EQ(readError(replaced(js, "\"hidden\": 7168", "\"hidden\": 7168, \"hiden\": 1")),
            "hiden at 8:19: unknown field");
  EXPECT_EQ(readError(replaced(js, "\"algo\": \"nccl\"", "\"algo\": \"ring\"")),
            "groups[0].points[3].algo at 22:18: unknown path \"ring\" (lowlatency, lowlatency2, oneshot, twoshot, "
            "hoststaged or nccl)");
  EXPECT_EQ(readError(replaced(js, "\"us\": 5}", "\"us\": 0}")),
            "groups[0].points[0].us at 19:67: must be a positive number of microseconds, got 0");
  EXPECT_EQ(readError(replaced(js, "\"twoshot\": 14680064", "\"twoshot\": 99999999")),
            "groups[0].best_up_to_bytes at 14:27: disagrees with the points (crossovers come from the measurements; "
            "re-run arfuse doctor --calibrate instead of editing the file)");
  EXPECT_EQ(readError(replaced(js, "\"tokens\": 1,", "\"tokens\": 1.0,")).substr(0, 40),
            "groups[0].points[0].tokens at 19:42: exp");
  EXPECT_EQ(readError(js.substr(0, js.size() / 2)).rfind("JSON syntax error at ", 0), 0u);
}

// Numbers a file gives are bounded (issue 37 item 3): a byte count up to LLONG_MAX was accepted and
// the one-shot limit, crossover x (nranks - 1), overflowed to a negative limit that silently turned
// one-shot off (and is undefined behaviour: the sanitized suite stops on it).
TEST(Calibration, NumbersAreBoundedAndTheLimitArithmeticCannotOverflow) {
  const std::string js = calibrationToJson(eightRanks(load("h200_8x_nvswitch")));
  EXPECT_EQ(readError(replaced(js, "\"bytes\": 14336,", "\"bytes\": 4611686018427387905,")),
            "groups[0].points[0].bytes at 19:54: 4611686018427387905 is out of range [1, 1099511627776]");
  EXPECT_EQ(readError(replaced(js, "\"oneshot\": 229376", "\"oneshot\": 9223372036854775807")).substr(0, 76),
            "groups[0].best_up_to_bytes.oneshot at 14:60: 9223372036854775807 is out of r");
  EXPECT_EQ(readError(replaced(js, "\"tokens\": 1,", "\"tokens\": 2147483647,")).substr(0, 70),
            "groups[0].points[0].tokens at 19:42: 2147483647 is out of range [1, 16");
  EXPECT_EQ(readError(replaced(js, "\"us\": 5}", "\"us\": 1e300}")),
            "groups[0].points[0].us at 19:67: 1e300 us is over the bound of 1e9 us (1000 s) per call");
  // A calibration made in code, not read from a file: the limit saturates instead of wrapping.
  const topo::Topology t = load("h200_8x_nvswitch");
  Calibration c = eightRanks(t);
  const long long big = 1ll << 61;  // one-shot fastest up to 2^61 B, NCCL above: 2^61 x 7 peers > 2^63
  c.groups[0].points = {
      {"oneshot", 1, big, 1.0}, {"nccl", 1, big, 2.0}, {"oneshot", 2, 2 * big, 3.0}, {"nccl", 2, 2 * big, 2.0}};
  PlanPolicy p;
  std::string why;
  ASSERT_EQ(policyFromCalibration(c, uuidsOf(t, allDevices(t)), c.fingerprint, 8, "calibration x", &p, &why).into(&why),
            arfuseSuccess)
      << why;
  EXPECT_EQ(p.oneShotMaxBytes, LLONG_MAX) << why;
}

TEST(Calibration, MatchesOnlyItsOwnGpusFabricAndRankCount) {
  const topo::Topology t = load("h200_8x_nvswitch");
  const Calibration c = eightRanks(t);
  const auto devs = allDevices(t);
  PlanPolicy p, orig;
  std::string why;
  // Other GPUs: the first four of the machine.
  const std::vector<int> four = {0, 1, 2, 3};
  EXPECT_EQ(policyFromCalibration(c, uuidsOf(t, four), topo::calibrationFingerprint(t, four), 4, "calibration c.json",
                                  &p, &why)
                .into(&why),
            arfuseInvalidArgument);
  EXPECT_NE(why.find("calibration c.json does not apply: it was measured on GPUs [GPU-"), std::string::npos) << why;
  // Same GPUs, changed fabric.
  topo::Topology changed = t;
  changed.link(2, 5).measured.peerStore = false;  // measured facts do not change the key...
  EXPECT_EQ(topo::calibrationFingerprint(changed, devs), c.fingerprint);
  changed.link(2, 5).canAccessPeer = false;  // ...reported ones do
  EXPECT_NE(policyFromCalibration(c, uuidsOf(t, devs), topo::calibrationFingerprint(changed, devs), 8, "cal", &p, &why)
                .into(&why),
            arfuseSuccess);
  EXPECT_NE(why.find("the fabric changed since it was measured (fingerprint " + c.fingerprint), std::string::npos)
      << why;
  EXPECT_NE(why.find("re-run `arfuse doctor --calibrate`"), std::string::npos) << why;
  // Same GPUs and fabric, another rank count (16 virtual ranks on the 8 GPUs).
  std::vector<int> sixteen = devs;
  sixteen.insert(sixteen.end(), devs.begin(), devs.end());
  EXPECT_NE(policyFromCalibration(c, uuidsOf(t, sixteen), c.fingerprint, 16, "cal", &p, &why).into(&why),
            arfuseSuccess);
  EXPECT_EQ(why,
            "cal does not apply: it has no measurement for 16 ranks (it has 8); run `arfuse doctor --calibrate "
            "--ranks 16`");
  EXPECT_TRUE(p.calibratedFrom.empty());
  EXPECT_EQ(p.oneShotMaxBytes, orig.oneShotMaxBytes);  // untouched on every failure
  // Rank order does not matter.
  std::vector<int> shuffled = {7, 3, 1, 0, 2, 6, 5, 4};
  EXPECT_EQ(policyFromCalibration(c, uuidsOf(t, shuffled), c.fingerprint, 8, "cal", &p, &why).into(&why), arfuseSuccess)
      << why;
}

TEST(Calibration, PolicyFromMeasuredCrossovers) {
  const topo::Topology t = load("h200_8x_nvswitch");
  const Calibration c = eightRanks(t);
  PlanPolicy p;
  p.forcedBy = "kept";
  std::string why;
  ASSERT_EQ(policyFromCalibration(c, uuidsOf(t, allDevices(t)), c.fingerprint, 8, "calibration /etc/arfuse/cal.json",
                                  &p, &why)
                .into(&why),
            arfuseSuccess)
      << why;
  EXPECT_EQ(p.lowLatencyMaxBytes, -1);          // fastest up to its largest size: the buffer limit decides
  EXPECT_EQ(p.oneShotMaxBytes, 16 * kRow * 7);  // fastest up to 16 tokens, in bytes x peers
  EXPECT_EQ(p.ncclAboveBytes, 1024 * kRow);     // NCCL won the largest size; two-shot won up to 1024
  EXPECT_EQ(p.hostStagedMaxBytes, PlanPolicy{}.hostStagedMaxBytes);  // host-staged not measured: unchanged
  EXPECT_EQ(p.calibratedFrom, "calibration /etc/arfuse/cal.json");
  EXPECT_EQ(p.forcedBy, "kept");
  EXPECT_EQ(why, "calibration /etc/arfuse/cal.json applies (8 ranks, " + c.fingerprint +
                     ", measured 2026-11-30T10:00:00Z at hidden 7168 bf16): lowlatency up to its buffer limit, "
                     "one-shot limit 1605632 B (x peers), nccl above 14680064 B");

  // The plan under that policy, on the machine it was measured on.
  Fabric f;
  std::string err;
  ASSERT_EQ(fabricFromTopology(t, allDevices(t), true, &f).into(&err), arfuseSuccess) << err;
  auto plan = [&](int tokens) { return planAt(f, p, tokens); };
  EXPECT_EQ(plan(4).algo, arfuseAlgoLowLatency);
  Plan p16 = plan(16);
  EXPECT_EQ(p16.algo, arfuseAlgoOneShot) << p16.reason;
  EXPECT_EQ(p16.reason,
            "oneshot: 229376 B x 7 peers = 1605632 B <= one-shot limit 1605632 B (calibration "
            "/etc/arfuse/cal.json)");
  Plan p32 = plan(32);
  EXPECT_EQ(p32.algo, arfuseAlgoTwoShot) << p32.reason;
  EXPECT_NE(p32.reason.find("> one-shot limit 1605632 B (calibration /etc/arfuse/cal.json)"), std::string::npos);
  EXPECT_EQ(plan(1024).algo, arfuseAlgoTwoShot);
  Plan p2048 = plan(2048);
  EXPECT_EQ(p2048.algo, arfuseAlgoNccl) << p2048.reason;
  EXPECT_EQ(p2048.reason,
            "nccl: 29360128 B > 14680064 B, above which NCCL measured faster than every arfuse path "
            "(calibration /etc/arfuse/cal.json)");
  // Without the calibration the same machine keeps the built-in rules and says so.
  Plan def = makePlan(f, Limits{}, PlanPolicy{}, PlanRequest{arfuseOpAllReduceAddRmsNorm, 2048, 7168, arfuseBfloat16});
  EXPECT_EQ(def.algo, arfuseAlgoTwoShot);
  EXPECT_NE(def.reason.find("built-in default, not calibrated"), std::string::npos) << def.reason;
}

// Forced above its one-phase limit the low-latency path runs its two-phase variant; doctor records
// those points as "lowlatency2", and where it was the fastest becomes the auto plan's window for it.
TEST(Calibration, TwoPhaseLowLatencyWindowFromItsPoints) {
  const topo::Topology t = load("h200_8x_nvswitch");
  Calibration c = eightRanks(t);
  CalibrationGroup& g = c.groups[0];
  add(&g, "lowlatency2", 8, 8.0);    // one-shot 8.8: two-phase the fastest
  add(&g, "lowlatency2", 16, 10.0);  // one-shot 10.5
  add(&g, "lowlatency2", 32, 14.0);  // two-shot 13.0: not the fastest
  PlanPolicy p;
  std::string why;
  ASSERT_EQ(policyFromCalibration(c, uuidsOf(t, allDevices(t)), c.fingerprint, 8, "cal", &p, &why).into(&why),
            arfuseSuccess)
      << why;
  EXPECT_EQ(p.llTwoPhaseMaxBytes, 16 * kRow);
  EXPECT_NE(why.find("lowlatency two-phase <= 229376 B"), std::string::npos) << why;
  Fabric f;
  std::string err;
  ASSERT_EQ(fabricFromTopology(t, allDevices(t), true, &f).into(&err), arfuseSuccess) << err;
  auto plan = [&](int tokens) { return planAt(f, p, tokens); };
  Plan p16 = plan(16);
  EXPECT_EQ(p16.algo, arfuseAlgoLowLatency) << p16.reason;
  EXPECT_TRUE(p16.variant) << p16.reason;
  EXPECT_FALSE(plan(4).variant);  // within the one-phase limit
  EXPECT_EQ(plan(32).algo, arfuseAlgoTwoShot) << plan(32).reason;
  // it round-trips through the file like every other path's points
  Calibration back;
  ASSERT_EQ(calibrationFromJson(calibrationToJson(c), &back).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(calibrationToJson(back), calibrationToJson(c));
  // never the fastest: the window is closed and the reason says so
  CalibrationGroup& h = c.groups[0];
  for (CalibrationPoint& q : h.points)
    if (q.algo == "lowlatency2") q.us = 99.0;
  PlanPolicy closed;
  ASSERT_EQ(policyFromCalibration(c, uuidsOf(t, allDevices(t)), c.fingerprint, 8, "cal", &closed, &why).into(&why),
            arfuseSuccess)
      << why;
  EXPECT_EQ(closed.llTwoPhaseMaxBytes, 0);
  EXPECT_NE(why.find("lowlatency two-phase never the fastest"), std::string::npos) << why;
}

TEST(Calibration, TwoRanksAndALowLatencyCap) {
  // Two virtual ranks on one GPU: one-shot wins everywhere above 2 tokens, low-latency below.
  const topo::Topology t = load("h200_1x");
  Calibration c;
  c.created = "2026-11-30T10:00:00Z";
  c.gpus = {t.gpus[0].uuid};
  c.fingerprint = topo::calibrationFingerprint(t, {0});
  c.hidden = 7168;
  c.dtype = "bf16";
  CalibrationGroup g;
  g.nranks = 2;
  g.virtualRanks = true;
  for (int tok : {1, 2, 4}) add(&g, "lowlatency", tok, tok <= 2 ? 4.0 : 9.0);
  for (int tok : {1, 2, 4, 64, 1024}) add(&g, "oneshot", tok, 6.0 + tok * 0.1);
  for (int tok : {1, 2, 4, 64, 1024}) add(&g, "twoshot", tok, 8.0 + tok * 0.2);
  c.groups.push_back(g);
  PlanPolicy p;
  std::string why;
  // A real 2-GPU group is not a virtual one.
  ASSERT_NE(policyFromCalibration(c, {t.gpus[0].uuid, "GPU-other"}, c.fingerprint, 2, "cal", &p, &why).into(&why),
            arfuseSuccess);
  ASSERT_EQ(policyFromCalibration(c, {t.gpus[0].uuid, t.gpus[0].uuid}, c.fingerprint, 2, "cal", &p, &why).into(&why),
            arfuseSuccess)
      << why;
  EXPECT_NE(why.find("(2 virtual ranks, "), std::string::npos) << why;
  EXPECT_EQ(p.lowLatencyMaxBytes, 2 * kRow);
  EXPECT_EQ(p.oneShotMaxBytes, LLONG_MAX);
  EXPECT_EQ(p.ncclAboveBytes, -1);
  Fabric f;
  std::string err;
  ASSERT_EQ(fabricFromTopology(t, {0, 0}, false, &f).into(&err), arfuseSuccess) << err;
  PlanRequest r;
  r.hidden = 7168;
  r.tokens = 2;
  Plan a = makePlan(f, Limits{}, p, r);
  EXPECT_EQ(a.algo, arfuseAlgoLowLatency);
  EXPECT_EQ(a.reason,
            "lowlatency: 28672 B <= 28672 B (cal): rows pushed with readiness in every word, no separate "
            "barrier");
  r.tokens = 3;
  Plan b = makePlan(f, Limits{}, p, r);
  EXPECT_EQ(b.algo, arfuseAlgoOneShot);
  EXPECT_EQ(b.reason, "oneshot: 43008 B x 1 peers = 43008 B <= one-shot limit unlimited (cal)");
}

TEST(Calibration, HostStagedAgainstNcclWithoutPeerAccess) {
  const topo::Topology t = load("rtx5090_2x_nop2p");
  Calibration c;
  c.created = "2026-11-30T10:00:00Z";
  c.gpus = uuidsOf(t, {0, 1});
  std::sort(c.gpus.begin(), c.gpus.end());
  c.fingerprint = topo::calibrationFingerprint(t, {0, 1});
  c.hidden = 7168;
  c.dtype = "bf16";
  CalibrationGroup g;
  g.nranks = 2;
  for (int tok : {1, 16, 64, 256}) add(&g, "hoststaged", tok, 10.0 + tok * 0.5);
  for (int tok : {1, 16, 64, 256}) add(&g, "nccl", tok, 40.0 + tok * 0.2);
  g.notes = {"lowlatency: not eligible: no peer access"};
  c.groups.push_back(g);
  PlanPolicy p;
  std::string why;
  ASSERT_EQ(policyFromCalibration(c, uuidsOf(t, {1, 0}), c.fingerprint, 2, "cal", &p, &why).into(&why), arfuseSuccess)
      << why;
  EXPECT_EQ(p.hostStagedMaxBytes, 64 * kRow);  // 42 vs 52.8 us at 64 tokens; NCCL wins at 256
  EXPECT_EQ(p.oneShotMaxBytes, PlanPolicy{}.oneShotMaxBytes);
  EXPECT_EQ(p.lowLatencyMaxBytes, -1);
  Fabric f;
  std::string err;
  ASSERT_EQ(fabricFromTopology(t, {0, 1}, true, &f).into(&err), arfuseSuccess) << err;
  PlanRequest r;
  r.hidden = 7168;
  r.tokens = 64;
  Plan a = makePlan(f, Limits{}, p, r);
  EXPECT_EQ(a.algo, arfuseAlgoHostStaged) << a.reason;
  EXPECT_NE(a.reason.find("<= host-staged limit (cal)"), std::string::npos) << a.reason;
  r.tokens = 65;
  Plan b = makePlan(f, Limits{}, p, r);
  EXPECT_EQ(b.algo, arfuseAlgoNccl) << b.reason;
  EXPECT_NE(b.reason.find("> host-staged limit 917504 B (cal)"), std::string::npos) << b.reason;
}

TEST(Calibration, LoadFromFile) {
  const topo::Topology t = load("h200_8x_nvswitch");
  const Calibration c = eightRanks(t);
  PlanPolicy p;
  std::string why;
  // A file that cannot be opened is a system error; one that does not match, an invalid argument.
  EXPECT_EQ(loadCalibrationPolicy("/nonexistent/arfuse-cal.json", uuidsOf(t, allDevices(t)), c.fingerprint, 8, &p, &why)
                .into(&why),
            arfuseSystemError);
  EXPECT_EQ(why,
            "calibration /nonexistent/arfuse-cal.json does not apply: /nonexistent/arfuse-cal.json: cannot open: No "
            "such file "
            "or directory");
  const std::string path = ::testing::TempDir() + "arfuse_calibration_test.json";
  {
    std::ofstream f(path);
    f << calibrationToJson(c);
  }
  ASSERT_EQ(loadCalibrationPolicy(path, uuidsOf(t, allDevices(t)), c.fingerprint, 8, &p, &why).into(&why),
            arfuseSuccess)
      << why;
  EXPECT_EQ(p.calibratedFrom, "calibration " + path);
  {
    std::ofstream f(path);
    f << "{\"schema\": \"arfuse-calibration/1\"}";
  }
  PlanPolicy q;
  EXPECT_NE(loadCalibrationPolicy(path, uuidsOf(t, allDevices(t)), c.fingerprint, 8, &q, &why).into(&why),
            arfuseSuccess);
  EXPECT_EQ(why, "calibration " + path + " does not apply: created at 1:1: missing required field \"created\"");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace arfuse
