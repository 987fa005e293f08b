// How a group that spans hosts names the ranks of its intra-host error records: the kernels record
// local ranks; messages name global ranks with their host (src/comm/comm.cc groupAsyncError uses
// describeLocalRank as describeErrorRecord's namer).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "diag/device_records.h"
#include "diag/records.h"
#include "diag_test_util.h"
#include "init/host_layout.h"

namespace arfuse {
namespace {

using testing_diag::fusedDesc;
using testing_diag::rec;

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

}  // namespace
}  // namespace arfuse
