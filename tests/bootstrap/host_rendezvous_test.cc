// Host identities through the real rendezvous (TCP on loopback, ranks as threads), as phase A of
// arfuseCommInitRank carries them: each rank sends its identity under a fake host id
// (init/host_layout.h hostIdentityOf, what ARFUSE_TEST_HOST_ID does), and every rank groups the
// gathered bytes into the same hosts, local indices and, for unequal hosts, the same error.
#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <thread>

#include "bootstrap/bootstrap.h"
#include "init/host_layout.h"
#include "test_util.h"

namespace arfuse {
namespace bootstrap {
namespace {

struct IdBlob {
  uint64_t hash;
  char label[64];
};

// Every rank's layout, computed from what the rendezvous gave that rank.
std::vector<HostLayout> layoutsThroughRendezvous(const std::vector<std::string>& fakeIds) {
  const int n = static_cast<int>(fakeIds.size());
  UniqueId id;
  std::string err;
  EXPECT_EQ(makeUniqueId(testing::tcpOptions(10000), &id).into(&err), arfuseSuccess) << err;
  std::vector<std::future<HostLayout>> f;
  for (int r = 0; r < n; ++r)
    f.push_back(std::async(std::launch::async, [&, r] {
      const HostIdentity me = hostIdentityOf("node", "boot-id", fakeIds[r]);
      IdBlob blob{};
      blob.hash = me.hash;
      std::snprintf(blob.label, sizeof blob.label, "%s", me.label.c_str());
      std::vector<uint8_t> all;
      std::string e;
      HostLayout l;
      if (allGather(id, r, n, &blob, sizeof blob, &all, testing::shortOptions(10000)).into(&e) != arfuseSuccess) {
        l.error = "rendezvous: " + e;
        return l;
      }
      std::vector<uint64_t> hashes(n);
      std::vector<std::string> labels(n);
      for (int s = 0; s < n; ++s) {
        IdBlob b;
        std::memcpy(&b, all.data() + s * sizeof b, sizeof b);
        hashes[s] = b.hash;
        labels[s] = std::string(b.label, strnlen(b.label, sizeof b.label));
      }
      return groupHosts(hashes, labels);
    }));
  std::vector<HostLayout> out;
  for (auto& x : f) out.push_back(x.get());
  return out;
}

TEST(HostRendezvous, EveryRankGroupsTheSameHostsFromTheGatheredIdentities) {
  const std::vector<HostLayout> ls = layoutsThroughRendezvous({"h0", "h0", "h1", "h1"});
  for (const HostLayout& l : ls) {
    ASSERT_TRUE(l.ok()) << l.error;
    EXPECT_EQ(l.hosts, 2);
    EXPECT_EQ(l.localRanks, 2);
    EXPECT_EQ(l.hostOf, (std::vector<int>{0, 0, 1, 1}));
    EXPECT_EQ(l.localOf, (std::vector<int>{0, 1, 0, 1}));
    EXPECT_EQ(l.labels, (std::vector<std::string>{"test:h0", "test:h1"}));
  }
}

TEST(HostRendezvous, InterleavedHostsAndOneRankPerHost) {
  for (const HostLayout& l : layoutsThroughRendezvous({"b", "a", "b", "a", "b", "a"})) {
    ASSERT_TRUE(l.ok()) << l.error;
    EXPECT_EQ(l.ranksOf, (std::vector<std::vector<int>>{{0, 2, 4}, {1, 3, 5}}));
  }
  for (const HostLayout& l : layoutsThroughRendezvous({"x", "y"})) {
    ASSERT_TRUE(l.ok()) << l.error;
    EXPECT_EQ(l.hosts, 2);
    EXPECT_EQ(l.localRanks, 1);
  }
}

TEST(HostRendezvous, UnequalHostsFailEveryRankWithTheSameMessage) {
  const std::vector<HostLayout> ls = layoutsThroughRendezvous({"h0", "h0", "h0", "h1"});
  ASSERT_EQ(ls.size(), 4u);
  for (const HostLayout& l : ls) {
    EXPECT_FALSE(l.ok());
    EXPECT_EQ(l.error, ls[0].error);
  }
  EXPECT_NE(ls[0].error.find("host test:h1: 1 (first rank 3)"), std::string::npos) << ls[0].error;
}

}  // namespace
}  // namespace bootstrap
}  // namespace arfuse
