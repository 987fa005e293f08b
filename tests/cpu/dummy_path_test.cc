// Issue 34's proof that a path is one unit: a dummy path added by one folder (tests/cpu/dummy_path/:
// its entry and its issue steps, as src/algos/<path>/ holds them) and one line in the registry's list
// (src/algos/paths.def, copied by tests/cpu/CMakeLists.txt with that line added) and nothing else
// is planned, by the auto walk and when forced; named by the C ABI, ARFUSE_ALGO (set to "dummy" for
// the DummyPathUnderArfuseAlgo tests) and a config's id; listed and accepted by `arfuse plan` (its real command, run
// here) and the CLI's parsers; in the Python package's generated names; sized into the workspace; and prepared and
// issued through its own steps.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algos/registry.h"
#include "cli.h"
#include "plan_args.h"
#include "plan_fixtures.h"
#include "policy/config.h"
#include "python_names.h"
#include "selftest_args.h"

namespace arfuse {

extern int dummyLaunches;  // tests/cpu/dummy_path/issue.cc

namespace {

using testing_fixtures::nvlink8;
using testing_fixtures::req;

const arfuseAlgo_t kDummy = arfuseAlgo_t(15);

TEST(DummyPath, ThePlanWalksItAndAForcedCallReachesIt) {
  const Fabric f = nvlink8();
  // 3 tokens of 16384 bf16 = 98304 B: above the low-latency limit, so the walk reaches the dummy
  // (listed before one-shot), which takes 3 tokens only.
  Plan p = makePlan(f, Limits{}, PlanPolicy{}, req(3, 16384));
  EXPECT_EQ(p.algo, kDummy);
  EXPECT_EQ(p.reason, "dummy: 98304 B in 3 tokens");
  EXPECT_EQ(p.blocks, 7);
  EXPECT_EQ(p.threads, 96);
  EXPECT_EQ(makePlan(f, Limits{}, PlanPolicy{}, req(5, 16384)).algo, arfuseAlgoTwoShot);  // walked past it
  PlanPolicy forced;
  forced.forcedAlgo = kDummy;
  forced.forcedBy = "config";
  p = makePlan(f, Limits{}, forced, req(3));
  EXPECT_EQ(p.algo, kDummy);
  EXPECT_EQ(p.reason, "dummy: 43008 B in 3 tokens (forced)");
  EXPECT_EQ(makePlan(f, Limits{}, forced, req(4)).reason, "algo=dummy (forced by config) takes 3 tokens only");
  // A group that spans hosts: the dummy does not cross hosts, so forcing it is refused with the reason.
  Fabric hosts = f;
  hosts.hosts = 2;
  hosts.localRanks = 4;
  EXPECT_NE(makePlan(hosts, Limits{}, forced, req(3)).reason.find("algo=dummy (forced by config) runs within one host"),
            std::string::npos);
}

TEST(DummyPath, ItsNameIsTheEntrysEverywhere) {
  EXPECT_STREQ(arfuseAlgoName(kDummy), "dummy");
  EXPECT_EQ(parseAlgoName("dummy"), kDummy);
  EXPECT_NE(algoNamesText().find(", dummy, "), std::string::npos) << algoNamesText();
  // A config's id forces it.
  ResolvedConfig rc;
  std::string msg;
  arfuseConfig_t c = ARFUSE_CONFIG_INITIALIZER;
  c.algo = kDummy;
  ASSERT_EQ(resolveConfig(&c, 8, &rc).into(&msg), arfuseSuccess) << msg;
  EXPECT_EQ(rc.policy.forcedAlgo, kDummy);
  EXPECT_EQ(rc.policy.forcedBy, "config");
}

// Run by CTest with ARFUSE_ALGO=dummy (cpu_dummy_path_test's second registration).
TEST(DummyPathUnderArfuseAlgo, ArfuseAlgoForcesIt) {
  ResolvedConfig rc;
  std::string msg;
  ASSERT_EQ(resolveConfig(nullptr, 8, &rc).into(&msg), arfuseSuccess) << msg;
  EXPECT_EQ(rc.policy.forcedAlgo, kDummy);
  EXPECT_EQ(rc.policy.forcedBy, "ARFUSE_ALGO");
  testing::internal::CaptureStdout();
  EXPECT_EQ(cli::plan({"--ranks", "8", "--tokens", "3"}), cli::kExitOk);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("dummy: 43008 B in 3 tokens (forced)"), std::string::npos) << out;
}

// The Python package's Algo members are generated from the registry: with the dummy they are the
// committed ones (python/arfuse/_types.py) and one more.
TEST(DummyPath, ThePythonNamesHaveIt) {
  const std::string committed = testing_fixtures::committedPythonAlgoMembers();
  ASSERT_NE(committed, "");
  EXPECT_EQ(pythonAlgoMembers(), committed + "    Dummy = 15\n");
}

// `arfuse plan` (its real command): the auto walk reaches it, --algo forces it, --help lists it.
TEST(DummyPath, ArfusePlanPrintsIt) {
  testing::internal::CaptureStdout();
  EXPECT_EQ(cli::plan({"--ranks", "8", "--hidden", "16384", "--tokens", "3,5"}), cli::kExitOk);
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("dummy        7       96      dummy: 98304 B in 3 tokens\n"), std::string::npos) << out;
  testing::internal::CaptureStdout();
  EXPECT_EQ(cli::plan({"--ranks", "8", "--tokens", "3", "--algo", "dummy"}), cli::kExitOk);
  out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("dummy: 43008 B in 3 tokens (forced)"), std::string::npos) << out;
  testing::internal::CaptureStdout();
  EXPECT_EQ(cli::plan({"--help"}), cli::kExitOk);
  out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("|dummy|"), std::string::npos) << out;
}

TEST(DummyPath, TheCliParsersTakeIt) {
  cli::PlanArgs a;
  std::string err;
  ASSERT_TRUE(cli::parsePlanArgs({"--algo", "dummy"}, &a, &err)) << err;
  EXPECT_EQ(a.algo, kDummy);
  EXPECT_FALSE(cli::parsePlanArgs({"--algo", "dumy"}, &a, &err));
  EXPECT_NE(err.find(", dummy, "), std::string::npos) << err;
  cli::ProcsArgs p;
  ASSERT_TRUE(cli::parseProcsArgs({"--procs", "2", "--algo", "dummy"}, &p, &err)) << err;
  EXPECT_EQ(p.algo, kDummy);
}

TEST(DummyPath, ItsBuffersAreInTheWorkspace) {
  // The dummy's entry adds 4096 B to the low-latency buffer: 8 ranks' buffer and 4096 B.
  const Workspace w = workspaceFor(Limits{}, 8, 64, 0);
  EXPECT_EQ(w.llBytes, static_cast<size_t>(kLlMaxCtas) * 2 * 8 * kLlRegionBytes + 4096);
}

// The library prepares and issues a call through the path's own steps (api/api.cc, api/enqueue.cc).
TEST(DummyPath, ItsOwnStepsPrepareAndIssueIt) {
  const AlgoEntry* e = findAlgo(kDummy);
  ASSERT_NE(e, nullptr);
  ASSERT_NE(e->issue.prepare, nullptr);
  const Plan plan = makePlan(nvlink8(), Limits{}, PlanPolicy{}, req(3, 16384));
  Call call;
  call.tokens = 3;
  call.hidden = 16384;
  AlgoLaunch launch;
  ASSERT_TRUE(e->issue.prepare(PrepareContext{nullptr, 0, plan, call}, &launch).ok());
  EXPECT_EQ(launch.l.threads, 96);
  EXPECT_FALSE(launch.collective);
  const int before = dummyLaunches;
  ASSERT_TRUE(e->issue.launch(launch).ok());
  EXPECT_EQ(dummyLaunches, before + 1);
}

}  // namespace
}  // namespace arfuse
