// `arfuse selftest` and `selftest --procs` arguments (tools/arfuse/selftest_args.h): strict values,
// errors that name the option, the launcher's worker command lines read back as written.
#include "selftest_args.h"

#include <gtest/gtest.h>

#include "arfuse/arfuse.h"

namespace arfuse {
namespace cli {
namespace {

std::string selftestError(const std::vector<std::string>& args) {
  SelftestArgs a;
  std::string err;
  EXPECT_FALSE(parseSelftestArgs(args, &a, &err)) << "accepted";
  return err;
}

std::string procsError(const std::vector<std::string>& args) {
  ProcsArgs p;
  std::string err;
  if (parseProcsArgs(args, &p, &err) && checkProcsArgs(p, &err)) return "accepted";
  return err;
}

TEST(SelftestArgs, RankCountsAndFlags) {
  SelftestArgs a;
  std::string err;
  ASSERT_TRUE(parseSelftestArgs({"--ranks", "2,4,16", "--virtual", "--quick"}, &a, &err)) << err;
  EXPECT_EQ(a.ranks, (std::vector<int>{2, 4, 16}));
  EXPECT_TRUE(a.forceVirtual);
  EXPECT_TRUE(a.quick);
  ASSERT_TRUE(parseSelftestArgs({"-h"}, &a, &err));
  EXPECT_TRUE(a.help);
}

TEST(SelftestArgs, BadValuesAreErrorsNamingTheOption) {
  // "4x" was read as 4 (atoi).
  EXPECT_EQ(selftestError({"--ranks", "4x"}),
            "--ranks wants a comma-separated list of whole numbers from 2 to 16, got '4x'");
  EXPECT_EQ(selftestError({"--ranks", "1"}),
            "--ranks wants a comma-separated list of whole numbers from 2 to 16, got '1'");
  EXPECT_EQ(selftestError({"--ranks"}), "--ranks needs a value");
  EXPECT_EQ(selftestError({"--rank", "2"}), "unknown option '--rank'");
}

TEST(SelftestProcsArgs, TheLaunchersAndAWorkersCommandLines) {
  ProcsArgs p;
  std::string err;
  ASSERT_TRUE(parseProcsArgs(
      {"--procs", "4", "--hosts", "2", "--kill-rank", "3", "--timeout-ms", "3000", "--algo", "hierarchical"}, &p, &err))
      << err;
  EXPECT_TRUE(checkProcsArgs(p, &err)) << err;
  EXPECT_EQ(p.nranks, 4);
  EXPECT_EQ(p.hosts, 2);
  EXPECT_EQ(p.killRank, 3);
  EXPECT_EQ(p.timeoutMs, 3000);
  EXPECT_EQ(p.algo, arfuseAlgoHierarchical);
  EXPECT_EQ(p.rank, -1);  // the launcher
  ProcsArgs w;
  ASSERT_TRUE(parseProcsArgs({"--procs", "4", "--proc-rank", "2", "--proc-dir", "/tmp/arfuse-x", "--timeout-ms",
                              "20000", "--algo", "auto", "--virtual", "--graph", "--seed", "18446744073709551615"},
                             &w, &err))
      << err;
  EXPECT_TRUE(checkProcsArgs(w, &err)) << err;
  EXPECT_EQ(w.rank, 2);
  EXPECT_EQ(w.dir, "/tmp/arfuse-x");
  EXPECT_EQ(w.algo, -1);  // auto
  EXPECT_TRUE(w.forceVirtual);
  EXPECT_TRUE(w.graph);
  EXPECT_FALSE(p.graph);
  EXPECT_EQ(w.seed, 18446744073709551615ull);
}

TEST(SelftestProcsArgs, BadValuesAndCombinationsAreErrors) {
  // Each of these was read leniently before (atoi: 4, 0, 0, 2; strtoull: 0).
  EXPECT_EQ(procsError({"--procs", "4x"}), "--procs wants a whole number from 2 to 16, got '4x'");
  EXPECT_EQ(procsError({"--procs", "4", "--timeout-ms", "abc"}),
            "--timeout-ms wants a whole number from 100 to 3600000, got 'abc'");
  EXPECT_EQ(procsError({"--procs", "4", "--kill-rank", "x"}), "--kill-rank wants a whole number from 1 to 15, got 'x'");
  EXPECT_EQ(procsError({"--procs", "4", "--hosts", "2x"}), "--hosts wants a whole number from 2 to 16, got '2x'");
  EXPECT_EQ(procsError({"--procs", "4", "--seed", "-1"}), "--seed wants a whole number from 0 to 2^64 - 1, got '-1'");
  EXPECT_EQ(procsError({"--procs", "4", "--seed", "18446744073709551616"}),
            "--seed wants a whole number from 0 to 2^64 - 1, got '18446744073709551616'");
  EXPECT_EQ(procsError({"--procs", "4", "--algo", "ring"}),
            "--algo wants auto, local, lowlatency, hoststaged, hierarchical, nccl, oneshot or twoshot, got 'ring'");
  EXPECT_EQ(procsError({"--procs", "4", "--proc-dir", ""}), "--proc-dir wants a directory, got ''");
  EXPECT_EQ(procsError({"--procs", "4", "--timeout"}), "unknown option '--timeout'");
  EXPECT_EQ(procsError({"--procs", "4", "--kill-rank", "4"}), "--kill-rank 4: must be 1..3 (rank 0 reports)");
  EXPECT_EQ(procsError({"--procs", "6", "--hosts", "4"}), "--hosts 4: must be 2..6 and divide --procs 6");
  EXPECT_EQ(procsError({"--procs", "4", "--proc-rank", "4", "--proc-dir", "/tmp/d"}), "--proc-rank 4: must be 0..3");
  EXPECT_EQ(procsError({"--procs", "4", "--proc-rank", "1"}),
            "--proc-rank needs --proc-dir (a worker of the launcher)");
}

}  // namespace
}  // namespace cli
}  // namespace arfuse
