// `arfuse plan`'s strict argument parsing and the plan's reasons: a typo is one usage error naming
// the argument (never a silent 8, 0 or a shorter list), and no reason ever has an empty detail.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algos/registry.h"
#include "args.h"
#include "plan/plan.h"
#include "plan_args.h"

namespace arfuse {
namespace cli {
namespace {

std::string parseError(const std::vector<std::string>& args) {
  PlanArgs a;
  std::string err;
  EXPECT_FALSE(parsePlanArgs(args, &a, &err)) << "accepted: " << (args.empty() ? "" : args[0]);
  return err;
}

TEST(CliArgs, NumbersAreWholeAndInRange) {
  int v = 0;
  std::string err;
  EXPECT_TRUE(parseIntArg("--ranks", "8", 1, 16, &v, &err));
  EXPECT_EQ(v, 8);
  for (const char* bad : {"8x", "x8", "", " 8", "8 ", "1e3", "0x10", "-", "17", "0", "99999999999999999999"}) {
    EXPECT_FALSE(parseIntArg("--ranks", bad, 1, 16, &v, &err)) << bad;
    EXPECT_EQ(err, "--ranks wants a whole number from 1 to 16, got '" + std::string(bad) + "'");
  }
  std::vector<int> list;
  EXPECT_TRUE(parseIntListArg("--tokens", "1,2,4096", 1, 1 << 20, &list, &err));
  EXPECT_EQ(list, (std::vector<int>{1, 2, 4096}));
  for (const char* bad : {"abc", "1,,2", "1,", ",1", "", "1;2", "2,abc"}) {
    list = {7};
    EXPECT_FALSE(parseIntListArg("--tokens", bad, 1, 1 << 20, &list, &err)) << bad;
    EXPECT_NE(err.find("--tokens wants a comma-separated list"), std::string::npos) << err;
    EXPECT_EQ(list, std::vector<int>{7}) << "a failed parse must not change the value";
  }
}

TEST(CliPlanArgs, TyposAreUsageErrorsNamingTheArgument) {
  EXPECT_EQ(parseError({"--ranks", "8x"}), "--ranks wants a whole number from 1 to 16, got '8x'");
  EXPECT_EQ(parseError({"--tokens", "abc"}).rfind("--tokens wants", 0), 0u);
  EXPECT_EQ(parseError({"--hidden", "-5"}), "--hidden wants a multiple of 8 from 8 to 1048576, got '-5'");
  EXPECT_NE(parseError({"--topology", "x.json", "--devices", "a,b"}).find("'a' is not one"), std::string::npos);
  EXPECT_EQ(parseError({"--ranks"}), "--ranks needs a value");
  EXPECT_EQ(parseError({"--bogus"}), "unknown option '--bogus'");
  EXPECT_EQ(parseError({"4"}), "unexpected argument '4'");
  EXPECT_EQ(parseError({"--virtual=yes"}), "--virtual takes no value, got '--virtual=yes'");
  EXPECT_NE(parseError({"--algo", "fast"}).find("hoststaged"), std::string::npos);
  EXPECT_NE(parseError({"--dtype", "int8"}).find("bf16, fp16 or fp32"), std::string::npos);
  EXPECT_NE(parseError({"--devices", "0,1"}).find("--topology"), std::string::npos);
  EXPECT_NE(parseError({"--topology", "x.json", "--ranks", "4"}).find("--devices"), std::string::npos);
  EXPECT_NE(parseError({"--no-p2p", "--virtual"}).find("drop one"), std::string::npos);
}

TEST(CliPlanArgs, HostsPlansAGroupOverSeveralHostsLikeTheDescribedOne) {
  PlanArgs a;
  std::string err;
  ASSERT_TRUE(parsePlanArgs({"--ranks", "8", "--hosts", "2", "--algo", "hierarchical"}, &a, &err)) << err;
  EXPECT_EQ(a.hosts, 2);
  EXPECT_EQ(a.algo, arfuseAlgoHierarchical);
  EXPECT_EQ(parseError({"--hosts", "1"}), "--hosts wants a whole number from 2 to 16, got '1'");
  EXPECT_NE(std::string(planUsage()).find("--hosts H"), std::string::npos);
}

TEST(CliPlanArgs, GoodArgumentsAreTakenAsWritten) {
  PlanArgs a;
  std::string err;
  ASSERT_TRUE(parsePlanArgs({"--ranks", "4", "--hidden", "4096", "--tokens", "1,16", "--dtype", "bfloat16", "--algo",
                             "hoststaged", "--no-p2p", "--allreduce"},
                            &a, &err))
      << err;
  EXPECT_EQ(a.ranks, 4);
  EXPECT_EQ(a.hidden, 4096);
  EXPECT_EQ(a.tokens, (std::vector<int>{1, 16}));
  EXPECT_EQ(a.dtype, arfuseBfloat16);
  EXPECT_EQ(a.algo, arfuseAlgoHostStaged);
  EXPECT_TRUE(a.noP2p && a.allreduce && !a.virtualRanks);
  ASSERT_TRUE(parsePlanArgs({"--topology", "m.json", "--devices", "0,0,3"}, &a, &err)) << err;
  EXPECT_EQ(a.devices, (std::vector<int>{0, 0, 3}));
}

// Every combination of what a fabric can lack, with the details left empty as a careless caller
// would leave them: every plan, good or refused, still has a reason without a hole in it.
TEST(PlanReasons, NeverEmptyNorHoled) {
  const int algos[] = {arfuseAlgoAuto,
                       arfuseAlgoLowLatency,
                       arfuseAlgoOneShot,
                       arfuseAlgoTwoShot,
                       arfuseAlgoHostStaged,
                       arfuseAlgoNccl,
                       42};
  int plans = 0;
  for (int nranks : {1, 2, 4, 8})
    for (int mask = 0; mask < 8; ++mask)
      for (int algo : algos)
        for (bool forcedByEmpty : {false, true})
          for (int tokens : {1, 8, 64, 2048}) {
            Fabric f;
            f.nranks = nranks;
            f.p2p = mask & 1;
            f.nccl = mask & 2;
            f.hostStaged = mask & 4;
            f.hostStagedCapacity = f.hostStaged ? (1ll << 30) : 0;
            f.lowLatencyMaxBytes = f.p2p ? 64 * 1024 : 0;
            f.maxBlocks = 64;
            f.smCount = 132;
            PlanPolicy policy;
            policy.forcedAlgo = algo;
            policy.forcedBy = forcedByEmpty ? "" : "--algo";
            Limits limits;
            PlanRequest req;
            req.tokens = tokens;
            req.hidden = 7168;
            const Plan p = makePlan(f, limits, policy, req);
            ++plans;
            const std::string& r = p.reason;
            SCOPED_TRACE("nranks " + std::to_string(nranks) + " mask " + std::to_string(mask) + " algo " +
                         std::to_string(algo) + " tokens " + std::to_string(tokens) + ": " + r);
            EXPECT_FALSE(r.empty());
            EXPECT_EQ(r.find("()"), std::string::npos);
            EXPECT_EQ(r.find(": ;"), std::string::npos);
            EXPECT_EQ(r.find("by  "), std::string::npos);
            EXPECT_EQ(r.find("by ("), std::string::npos);
            EXPECT_NE(r.back(), ' ');
            EXPECT_NE(r.back(), ':');
          }
  EXPECT_EQ(plans, 4 * 8 * 7 * 2 * 4);
}

}  // namespace
}  // namespace cli
}  // namespace arfuse
