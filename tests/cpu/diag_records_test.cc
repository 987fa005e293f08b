// Error records and call descriptors as the host reports them (src/diag/records.h).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "diag/records.h"
#include "diag_test_util.h"

namespace arfuse {
namespace {

using testing_diag::fusedDesc;
using testing_diag::rec;

TEST(DiagRecords, CallDescriptorsDecode) {
  const CallDesc d = fusedDesc(3, 7168);
  EXPECT_STREQ(callOpName(descOp(d)), "AllReduceAddRmsNorm");
  EXPECT_STREQ(callOpName(arfuseOpAllReduce), "AllReduce");
  EXPECT_STREQ(callOpName(7), "unknown");
  EXPECT_EQ(callDescBytes(d), 3LL * 7168 * 2);
  EXPECT_EQ(callDescBytes(makeCallDesc(arfuseOpAllReduce, arfuseFloat32, arfuseAlgoTwoShot, 0, 5, 4096)),
            5LL * 4096 * 4);
  EXPECT_EQ(callDescBytes(makeCallDesc(arfuseOpAllReduce, 9, arfuseAlgoTwoShot, 0, 5, 4096)), 0);
  EXPECT_STREQ(callDescPath(d), "oneshot");
  EXPECT_STREQ(callDescVariant(d), "");
  const CallDesc hs = makeCallDesc(arfuseOpAllReduce, arfuseFloat16, arfuseAlgoHostStaged, 1, 2, 1024);
  EXPECT_STREQ(callDescPath(hs), "hoststaged");
  EXPECT_STREQ(callDescVariant(hs), "twoshot");
  EXPECT_EQ(describeCallDesc(d, false), "AllReduceAddRmsNorm bf16 tokens=3 hidden=7168 (43008 B)");
  EXPECT_EQ(describeCallDesc(hs, true), "AllReduce fp16 tokens=2 hidden=1024 (4096 B, path hoststaged two-shot)");
  const CallDesc hier = makeCallDesc(arfuseOpAllReduceAddRmsNorm, arfuseBfloat16, arfuseAlgoHierarchical, 1, 64, 8192);
  EXPECT_STREQ(callDescPath(hier), "hierarchical");
  EXPECT_STREQ(callDescVariant(hier), "gather");
  EXPECT_NE(describeCallDesc(hier, true).find("path hierarchical phase 2 (intra-host gather + epilogue)"),
            std::string::npos);
  EXPECT_TRUE(callDescEmpty(CallDesc{0, 0}));
  EXPECT_FALSE(callDescEmpty(d));
}

TEST(DiagRecords, TimeoutSentenceNamesBothRanksCallBlockPhaseAndCall) {
  const ErrorRecord e = rec(kErrPeerTimeout, 2, 17, fusedDesc(), {0, 0}, 5, 0);
  EXPECT_EQ(describeErrorRecord(e, 0, 300000000ull),
            "rank 0 waited 0.300 s for rank 2 at call 17 (block 5, phase 0) in AllReduceAddRmsNorm bf16 tokens=1 "
            "hidden=7168 (14336 B, path oneshot); the group is aborted");
  // Without this rank's descriptor (older kernels) the sentence still stands.
  const ErrorRecord bare = rec(kErrPeerTimeout, 5, 8812, CallDesc{0, 0}, {0, 0}, 3, 1);
  EXPECT_EQ(describeErrorRecord(bare, 4, 5000000000ull),
            "rank 4 waited 5.000 s for rank 5 at call 8812 (block 3, phase 1); the group is aborted");
  EXPECT_EQ(resultForRecordCode(kErrPeerTimeout), arfusePeerTimeout);
  EXPECT_EQ(resultForRecordCode(kErrPeerTimeout), 8);
  EXPECT_EQ(errorRecordFields(e),
            "code=arfusePeerTimeout call=17 op=AllReduceAddRmsNorm bytes=14336 dtype=bf16 path=oneshot peer=2 block=5 "
            "phase=0");
  EXPECT_NE(nextStepFor(kErrPeerTimeout).find("arfuse triage"), std::string::npos);
}

// A group that spans hosts records local ranks; its namer gives the global rank and host.
TEST(DiagRecords, TimeoutSentenceUsesTheGroupsRankNames) {
  const ErrorRecord e = rec(kErrPeerTimeout, 1, 4, CallDesc{0, 0}, {0, 0}, 0, 0);
  const std::vector<int> global = {2, 3};  // host h1's local ranks 0 and 1
  auto name = [&](int q) {
    return "rank " + std::to_string(global[q]) + " (host h1, local rank " + std::to_string(q) + ")";
  };
  EXPECT_EQ(describeErrorRecord(e, 0, 3000000000ull, name),
            "rank 2 (host h1, local rank 0) waited 3.000 s for rank 3 (host h1, local rank 1) at call 4 (block 0, "
            "phase 0); the group is aborted");
  const ErrorRecord m = rec(kErrMismatch, 0, 9, fusedDesc(), fusedDesc(2), 0, 3);
  EXPECT_NE(describeErrorRecord(m, 1, 0, name).find("rank 3 (host h1, local rank 1) made"), std::string::npos);
}

TEST(DiagRecords, MismatchSentenceDecodesBothDescriptors) {
  const CallDesc mine = fusedDesc(1, 7168);
  const CallDesc theirs = makeCallDesc(arfuseOpAllReduce, arfuseBfloat16, arfuseAlgoOneShot, 0, 2, 7168);
  const ErrorRecord e = rec(kErrMismatch, 2, 311, mine, theirs, 0, 3);
  EXPECT_EQ(describeErrorRecord(e, 0, 300000000ull),
            "divergent call at call 311: rank 0 made AllReduceAddRmsNorm bf16 tokens=1 hidden=7168 (14336 B), rank 2 "
            "made AllReduce bf16 tokens=2 hidden=7168 (28672 B)");
  // Same shapes, different paths (e.g. ARFUSE_ALGO set on one rank only): the paths are named.
  const ErrorRecord p =
      rec(kErrMismatch, 1, 9, fusedDesc(4, 4096, arfuseAlgoOneShot), fusedDesc(4, 4096, arfuseAlgoHostStaged, 1), 0, 3);
  EXPECT_EQ(describeErrorRecord(p, 3, 0),
            "divergent call at call 9: rank 3 made AllReduceAddRmsNorm bf16 tokens=4 hidden=4096 (32768 B, path "
            "oneshot), rank 1 made AllReduceAddRmsNorm bf16 tokens=4 hidden=4096 (32768 B, path hoststaged two-shot)");
  EXPECT_EQ(resultForRecordCode(kErrMismatch), arfuseMismatch);
  EXPECT_EQ(resultForRecordCode(kErrMismatch), 10);
  EXPECT_EQ(errorRecordFields(e),
            "code=arfuseMismatch call=311 op=AllReduceAddRmsNorm bytes=14336 dtype=bf16 "
            "path=oneshot peer=2");
  EXPECT_NE(nextStepFor(kErrMismatch).find("make every rank issue the same calls"), std::string::npos);
}

TEST(DiagRecords, ConcurrentSentenceSaysOneStreamAtATime) {
  const ErrorRecord e = rec(kErrConcurrent, -1, 9, fusedDesc(), {0, 0}, 0, 4);
  EXPECT_EQ(describeErrorRecord(e, 1, 300000000ull),
            "two calls of rank 1 ran at the same time (call 9): a communicator must be used from one stream at a time");
  EXPECT_EQ(resultForRecordCode(kErrConcurrent), arfuseInvalidUsage);
  EXPECT_EQ(resultForRecordCode(kErrConcurrent), 2);
  EXPECT_EQ(errorRecordFields(e),
            "code=arfuseInvalidUsage call=9 op=AllReduceAddRmsNorm bytes=14336 dtype=bf16 "
            "path=oneshot");
  EXPECT_NE(nextStepFor(kErrConcurrent).find("one stream"), std::string::npos);
}

TEST(DiagRecords, UnknownCodeIsAnInternalError) {
  const ErrorRecord e = rec(9, 1, 4, fusedDesc(), {0, 0}, 2, 1);
  EXPECT_EQ(describeErrorRecord(e, 0, 0), "rank 0 recorded error code 9 at call 4 (peer 1, block 2, phase 1)");
  EXPECT_EQ(resultForRecordCode(9), arfuseInternalError);
  EXPECT_STREQ(recordCodeName(9), "unknown");
  EXPECT_STREQ(recordCodeName(kErrPeerTimeout), "peer_timeout");
  EXPECT_STREQ(recordCodeName(kErrMismatch), "mismatch");
  EXPECT_STREQ(recordCodeName(kErrConcurrent), "concurrent");
}

TEST(DiagRecords, ReadsOnlyValidRecordsOfTheGroupArea) {
  auto s = testing_diag::newShared();
  ErrorRecord out{};
  EXPECT_FALSE(readErrorRecord(*s, 0, &out));
  EXPECT_FALSE(readAbort(*s));
  testing_diag::record(s.get(), 3, kErrPeerTimeout, 1, 42, fusedDesc(), {0, 0}, 7, 1);
  EXPECT_FALSE(readErrorRecord(*s, 0, &out));
  EXPECT_FALSE(readErrorRecord(*s, kMaxRanks, &out));
  ASSERT_TRUE(readErrorRecord(*s, 3, &out));
  EXPECT_EQ(out.code, kErrPeerTimeout);
  EXPECT_EQ(out.peer, 1);
  EXPECT_EQ(out.block, 7);
  EXPECT_EQ(out.phase, 1);
  EXPECT_EQ(out.call, 42u);
  EXPECT_EQ(out.mine.w0, fusedDesc().w0);
  EXPECT_TRUE(readAbort(*s));
}

TEST(DiagRecords, EachErrorIsClaimedOncePerGroupArea) {
  auto a = testing_diag::newShared();
  auto b = testing_diag::newShared();
  const ErrorRecord e = rec(kErrPeerTimeout, 2, 17, fusedDesc());
  EXPECT_TRUE(claimErrorReport(a.get(), 0, e));
  EXPECT_FALSE(claimErrorReport(a.get(), 0, e));
  EXPECT_TRUE(claimErrorReport(a.get(), 1, e));  // another rank
  EXPECT_TRUE(claimErrorReport(b.get(), 0, e));  // another group
  const ErrorRecord later = rec(kErrPeerTimeout, 2, 18, fusedDesc());
  EXPECT_TRUE(claimErrorReport(a.get(), 0, later));  // another error
  forgetErrorReports(a.get());
  EXPECT_TRUE(claimErrorReport(a.get(), 0, e));  // the area was freed and reused
  EXPECT_FALSE(claimErrorReport(b.get(), 0, e));
  forgetErrorReports(a.get());
  forgetErrorReports(b.get());
}

// docs/troubleshooting.md's table has a row for every result code of the header.
TEST(DiagRecords, TroubleshootingListsEveryResultCode) {
  std::ifstream f(std::string(ARFUSE_SOURCE_DIR) + "/docs/troubleshooting.md");
  ASSERT_TRUE(f) << "docs/troubleshooting.md missing";
  std::stringstream ss;
  ss << f.rdbuf();
  for (int r = 0; r < arfuseNumResults; ++r) {
    const std::string name = arfuseGetErrorName(static_cast<arfuseResult_t>(r));
    EXPECT_NE(ss.str().find("| `" + name + "` | " + std::to_string(r) + " | "), std::string::npos)
        << "docs/troubleshooting.md has no row for " << name << " (" << r << ")";
  }
}

}  // namespace
}  // namespace arfuse
