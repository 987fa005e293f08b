// Host identity and the host layout of a group that spans hosts (init/host_layout.h), with fake
// host ids: grouping by host, local indices by global rank, the unequal-hosts error, the test
// override and how messages name a rank.
#include "init/host_layout.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace arfuse {
namespace {

std::vector<uint64_t> hashesOf(const std::vector<std::string>& ids) {
  std::vector<uint64_t> h;
  for (const std::string& id : ids) h.push_back(hostIdentityOf("node", "boot", id).hash);
  return h;
}
std::vector<std::string> labelsOf(const std::vector<std::string>& ids) {
  std::vector<std::string> l;
  for (const std::string& id : ids) l.push_back(hostIdentityOf("node", "boot", id).label);
  return l;
}

TEST(HostIdentity, HostnameAndBootIdOrTheTestOverride) {
  EXPECT_EQ(hostIdentityOf("a", "b1", "").hash, hostIdentityOf("a", "b1", "").hash);
  EXPECT_NE(hostIdentityOf("a", "b1", "").hash, hostIdentityOf("a", "b2", "").hash);  // another boot: another host
  EXPECT_NE(hostIdentityOf("a", "b1", "").hash, hostIdentityOf("c", "b1", "").hash);  // a container of the same boot
  EXPECT_EQ(hostIdentityOf("a", "b1", "").label, "a");
  // The override replaces hostname and boot id entirely.
  EXPECT_EQ(hostIdentityOf("a", "b1", "h0").hash, hostIdentityOf("z", "b9", "h0").hash);
  EXPECT_NE(hostIdentityOf("a", "b1", "h0").hash, hostIdentityOf("a", "b1", "h1").hash);
  EXPECT_EQ(hostIdentityOf("a", "b1", "h1").label, "test:h1");
  // The real identity is stable within a process.
  EXPECT_EQ(hostIdentity().hash, hostIdentity().hash);
}

// As NCCL identifies a host (issue 37 item 8e): NCCL_HOSTID, when set, replaces the host name and
// boot id, so arfuse and NCCL agree on who shares a host; the boot id's first word only counts.
TEST(HostIdentity, FollowsNcclHostIdAndTheBootIdsFirstWord) {
  EXPECT_EQ(hostIdentityOf("a", "b1", "", "rack7-node3").hash, hostIdentityOf("z", "b9", "", "rack7-node3").hash);
  EXPECT_NE(hostIdentityOf("a", "b1", "", "rack7-node3").hash, hostIdentityOf("a", "b1", "").hash);
  EXPECT_EQ(hostIdentityOf("a", "b1\n", "").hash, hostIdentityOf("a", "b1", "").hash);
  EXPECT_EQ(hostIdentityOf("a", "b1", "h0", "rack7-node3").hash, hostIdentityOf("a", "b1", "h0").hash);  // tests win
  // The process's own identity reads NCCL_HOSTID as NCCL does, at each call.
  const char* saved = std::getenv("NCCL_HOSTID");
  const std::string keep = saved ? saved : "";
  setenv("NCCL_HOSTID", "node-x", 1);
  const HostIdentity x = hostIdentity();
  setenv("NCCL_HOSTID", "node-y", 1);
  const HostIdentity y = hostIdentity();
  if (saved)
    setenv("NCCL_HOSTID", keep.c_str(), 1);
  else
    unsetenv("NCCL_HOSTID");
  EXPECT_NE(x.hash, y.hash);
  EXPECT_EQ(x.hash, hostIdentityOf("whatever", "any", "", "node-x").hash);
  EXPECT_GT(x.ipcNamespace, 0u);
}

// One host, two IPC namespaces (containers without --ipc=host): the group cannot share memory, and
// init says so instead of splitting the ranks into hosts NCCL would not see.
TEST(HostIdentity, OneHostInTwoIpcNamespacesIsNamed) {
  const std::vector<uint64_t> hashes = {1, 1, 2, 2}, same = {7, 7, 9, 9}, split = {7, 8, 9, 9};
  const std::vector<std::string> labels = {"node-a", "node-a", "node-b", "node-b"};
  EXPECT_EQ(ipcNamespaceConflict(hashes, same, labels), "");
  const std::string c = ipcNamespaceConflict(hashes, split, labels);
  EXPECT_NE(c.find("ranks 0 and 1 are on one host (node-a"), std::string::npos) << c;
  EXPECT_NE(c.find("--ipc=host"), std::string::npos) << c;
  EXPECT_NE(c.find("NCCL_HOSTID"), std::string::npos) << c;
}

TEST(HostLayout, TwoHostsOfTwo) {
  const std::vector<std::string> ids = {"h0", "h0", "h1", "h1"};
  const HostLayout l = groupHosts(hashesOf(ids), labelsOf(ids));
  ASSERT_TRUE(l.ok()) << l.error;
  EXPECT_EQ(l.hosts, 2);
  EXPECT_EQ(l.localRanks, 2);
  EXPECT_EQ(l.hostOf, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(l.localOf, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(l.ranksOf[1], (std::vector<int>{2, 3}));
  EXPECT_EQ(describeRank(l, 3), "rank 3 (host test:h1, local rank 1)");
}

TEST(HostLayout, InterleavedRanksTakeTheirOrderByGlobalRank) {
  const std::vector<std::string> ids = {"b", "a", "b", "a", "b", "a"};
  const HostLayout l = groupHosts(hashesOf(ids), labelsOf(ids));
  ASSERT_TRUE(l.ok()) << l.error;
  EXPECT_EQ(l.hosts, 2);
  EXPECT_EQ(l.localRanks, 3);
  EXPECT_EQ(l.hostOf, (std::vector<int>{0, 1, 0, 1, 0, 1}));  // hosts numbered by their lowest rank
  EXPECT_EQ(l.localOf, (std::vector<int>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(l.ranksOf[0], (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(l.ranksOf[1], (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(l.labels[1], "test:a");
}

TEST(HostLayout, OneRankPerHostAndOneHost) {
  const std::vector<std::string> two = {"h0", "h1"};
  HostLayout l = groupHosts(hashesOf(two), labelsOf(two));
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l.hosts, 2);
  EXPECT_EQ(l.localRanks, 1);
  const std::vector<std::string> one = {"h", "h", "h"};
  l = groupHosts(hashesOf(one), labelsOf(one));
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l.hosts, 1);
  EXPECT_EQ(l.localRanks, 3);
}

TEST(HostLayout, UnequalHostsAreRefusedNamingEveryHostAndItsCount) {
  const std::vector<std::string> ids = {"h0", "h0", "h0", "h1"};
  const HostLayout l = groupHosts(hashesOf(ids), labelsOf(ids));
  EXPECT_FALSE(l.ok());
  EXPECT_NE(l.error.find("same number of ranks on every host"), std::string::npos) << l.error;
  EXPECT_NE(l.error.find("host test:h0: 3 (first rank 0)"), std::string::npos) << l.error;
  EXPECT_NE(l.error.find("host test:h1: 1 (first rank 3)"), std::string::npos) << l.error;
}

}  // namespace
}  // namespace arfuse
