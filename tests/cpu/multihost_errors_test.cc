// How a group that spans hosts names the ranks of its intra-host error records: the kernels record
// local ranks; messages name global ranks with their host (src/comm/comm.cc groupAsyncError uses
// describeLocalRank as describeErrorRecord's namer).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "diag/device_records.h"
#include "diag/records.h"
#include "diag_test_util.h"
#include "init/group.h"
#include "init/host_layout.h"

namespace arfuse {
namespace {

using testing_diag::fusedDesc;
using testing_diag::rec;
using testing_diag::record;

// Host node-b's intra-host group (global ranks 2 and 3) of a 2 x 2 group.
struct HostB {
  HostLayout layout = groupHosts({11, 11, 22, 22}, {"node-a", "node-a", "node-b", "node-b"});
  std::vector<int> globalOf = layout.ranksOf[1];
  std::string name(int q) const { return describeLocalRank(layout, globalOf, q); }
};

TEST(MultiHostErrors, LocalRanksAreNamedGloballyWithTheirHost) {
  HostB b;
  ASSERT_TRUE(b.layout.ok()) << b.layout.error;
  EXPECT_EQ(b.name(0), "rank 2 (host node-b, local rank 0)");
  EXPECT_EQ(b.name(1), "rank 3 (host node-b, local rank 1)");
  EXPECT_EQ(b.name(2), "rank 2");  // not a local rank of this host: left as it is
  EXPECT_EQ(b.name(-1), "rank -1");
}

TEST(MultiHostErrors, IntraHostTimeoutSentenceNamesBothRanksGlobally) {
  HostB b;
  const ErrorRecord e = rec(kErrPeerTimeout, /*peer=*/1, 3, CallDesc{0, 0});
  EXPECT_EQ(describeErrorRecord(e, 0, 3000000000ull, [&](int q) { return b.name(q); }),
            "rank 2 (host node-b, local rank 0) waited 3.000 s for rank 3 (host node-b, local rank 1) at call 3 "
            "(block 0, phase 0); the group is aborted");
  const ErrorRecord n = rec(kErrNcclTimeout, -1, 2, fusedDesc());
  EXPECT_EQ(describeErrorRecord(n, 1, 3000000000ull, [&](int q) { return b.name(q); }).rfind("rank 3 (host node-b", 0),
            0u);
}

// The error a rank reports is the first it had. On the hierarchical path a rank whose local peer died
// fails its intra-host barrier (a kernel record) and may then time out in the NCCL all-reduce after
// it; the watch raises that second error on the host, which groupAsyncError (comm/comm.cc) prefers
// to any record. Raised as "after the record", it is logged and aborts, but sets no host error: the
// record stays the cause every call reports.
struct TwoRankGroup {
  std::unique_ptr<GroupShared> shared = std::make_unique<GroupShared>();
  Group g;
  TwoRankGroup() {
    g.nranks = 2;
    g.timeoutNs = 3000000000ull;
    g.shared = shared.get();
    g.ranks.resize(2);  // device -1: no CUDA resources
  }
};

TEST(MultiHostErrors, HostErrorAfterTheRanksOwnKernelRecordLeavesTheRecordAsTheReportedCause) {
  TwoRankGroup t;
  record(t.shared.get(), 0, kErrPeerTimeout, /*peer=*/1, 2, fusedDesc());
  raiseHostError(t.g, 0, arfusePeerTimeout, "NCCL operation 2 across hosts did not finish", "nccl_op=2", __FILE__,
                 __LINE__, /*afterRecord=*/true);
  EXPECT_FALSE(groupHasHostError(t.g));
  EXPECT_TRUE(readAbort(*t.shared));
  // groupAsyncError (comm/comm.cc) reports a host error first, else this rank's own record: the
  // record, untouched.
  ErrorRecord e{};
  ASSERT_TRUE(readErrorRecord(*t.shared, 0, &e));
  EXPECT_EQ(e.code, kErrPeerTimeout);
  EXPECT_EQ(e.peer, 1);
  EXPECT_EQ(describeErrorRecord(e, 0, t.g.timeoutNs).rfind("rank 0 waited 3.000 s for rank 1", 0), 0u);
}

TEST(MultiHostErrors, HostErrorWithoutAnEarlierRecordIsTheReportedOne) {
  TwoRankGroup t;
  raiseHostError(t.g, 0, arfusePeerTimeout, "NCCL operation 2 across hosts did not finish", "nccl_op=2", __FILE__,
                 __LINE__);
  EXPECT_TRUE(groupHasHostError(t.g));
  EXPECT_TRUE(readAbort(*t.shared));
  EXPECT_EQ(t.g.hostError.load(), arfusePeerTimeout);
  EXPECT_EQ(t.g.hostErrorText, "NCCL operation 2 across hosts did not finish");
  // Raised once: a later host error changes nothing.
  raiseHostError(t.g, 0, arfuseMismatch, "later", "", __FILE__, __LINE__);
  EXPECT_EQ(t.g.hostErrorText, "NCCL operation 2 across hosts did not finish");
}

}  // namespace
}  // namespace arfuse
