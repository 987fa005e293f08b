// The rendezvous over real loopback sockets: ranks as threads and as forked processes, every blob size
// the communicator will use, and each failure with a short timeout, its message and its elapsed time.
#include "bootstrap/bootstrap.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <future>
#include <thread>

#include "test_util.h"

namespace arfuse {
namespace bootstrap {
namespace {

using namespace testing;  // NOLINT: test helpers

// Both transports: the AF_UNIX default and TCP (as across hosts, here on loopback).
class BootstrapAllGather : public ::testing::TestWithParam<std::tuple<int, size_t, bool>> {};

TEST_P(BootstrapAllGather, EveryRankGetsEveryBlobInRankOrder) {
  const int nranks = std::get<0>(GetParam());
  const size_t bytes = std::get<1>(GetParam());
  const bool tcp = std::get<2>(GetParam());
  UniqueId id;
  std::string err;
  ASSERT_EQ(makeUniqueId(tcp ? tcpOptions(10000) : Options{}, &id).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(infoOf(id).family, tcp ? AF_INET : AF_UNIX);
  size_t listeners = listenerCount();
  Stopwatch sw;
  std::vector<std::future<RankOutcome>> f;
  for (int r = nranks - 1; r >= 0; --r) f.push_back(launch(id, r, nranks, bytes, shortOptions(10000)));
  const auto expected = expectedAll(nranks, bytes);
  for (auto& fu : f) {
    RankOutcome o = fu.get();
    ASSERT_EQ(o.result, arfuseSuccess) << o.error;
    ASSERT_EQ(o.all.size(), static_cast<size_t>(nranks) * bytes);
    EXPECT_TRUE(o.all == expected);
  }
  EXPECT_LT(sw.seconds(), 5.0);
  EXPECT_EQ(listenerCount(), listeners - 1);  // rank 0 closed its listener when done
}

INSTANTIATE_TEST_SUITE_P(RanksAndSizes, BootstrapAllGather,
                         ::testing::Combine(::testing::Values(2, 3, 8, 16),
                                            ::testing::Values(size_t{0}, size_t{1}, size_t{4096}, size_t{1} << 20),
                                            ::testing::Bool()));

TEST(BootstrapRendezvous, SingleRankNeedsNoPeers) {
  UniqueId id;
  std::string err;
  ASSERT_EQ(makeUniqueId(Options{}, &id).into(&err), arfuseSuccess) << err;
  auto mine = blobFor(0, 100);
  std::vector<uint8_t> all;
  ASSERT_EQ(allGather(id, 0, 1, mine.data(), mine.size(), &all, shortOptions(1000)).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(all, mine);
  // Once per id: the listener is gone, and a second rank-0 call says so.
  EXPECT_EQ(allGather(id, 0, 1, mine.data(), mine.size(), &all, shortOptions(1000)).into(&err), arfuseInvalidArgument);
  EXPECT_NE(err.find("rank 0 holds no listener for this id"), std::string::npos) << err;
}

TEST(BootstrapRendezvous, Ipv6Loopback) {
  UniqueId id;
  std::string err;
  Options o = shortOptions(5000);
  o.address = "::1";
  if (makeUniqueId(o, &id).into(&err) != arfuseSuccess) GTEST_SKIP() << "no IPv6 loopback here: " << err;
  auto a = launch(id, 0, 3, 64, o), b = launch(id, 1, 3, 64, o), c = launch(id, 2, 3, 64, o);
  for (auto* fu : {&a, &b, &c}) {
    RankOutcome out = fu->get();
    ASSERT_EQ(out.result, arfuseSuccess) << out.error;
    EXPECT_EQ(out.all, expectedAll(3, 64));
  }
}

TEST(BootstrapRendezvous, PeersStartedBeforeRankZeroRetryUntilItListens) {
  // The listener exists from makeUniqueId, so to model "rank 0 not up yet" the id points at a port
  // that is closed now and opened later by a fake rank 0 that answers correctly.
  uint16_t port = deadLoopbackPort();
  UniqueId id;
  std::string err;
  ASSERT_EQ(encodeUniqueId(loopbackInfo(port, 99), &id).into(&err), arfuseSuccess) << err;
  Stopwatch sw;
  auto peer = launch(id, 1, 2, 8, shortOptions(4000));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ::listen(lfd, 4);
  int fd = rawAccept(lfd);
  ASSERT_GE(fd, 0);
  const uint8_t challenge[16] = {9, 8, 7};
  ASSERT_TRUE(sendChallenge(fd, 99, challenge));
  std::vector<uint8_t> hello(32 + 32 + 8 + 32);
  ASSERT_TRUE(readExactly(fd, hello.data(), hello.size()));
  // What the peer sent is the authenticated hello a real rank sends.
  EXPECT_EQ(hello, authHello(infoOf(id), challenge, 1, 2, blobFor(1, 8)));
  auto all = expectedAll(2, 8);
  auto answer = resultFrame(infoOf(id), challenge, 2, all);
  ASSERT_EQ(::send(fd, answer.data(), answer.size(), 0), static_cast<ssize_t>(answer.size()));
  RankOutcome out = peer.get();
  ::close(fd);
  ::close(lfd);
  ASSERT_EQ(out.result, arfuseSuccess) << out.error;
  EXPECT_EQ(out.all, all);
  EXPECT_GE(sw.seconds(), 0.4);
  EXPECT_LT(sw.seconds(), 3.0);
}

TEST(BootstrapRendezvous, ForkedProcessesIncludingRankZero) {
  // The parent makes the id and forks every rank, rank 0 included: the forked rank 0 inherits the
  // listener. Each child checks its own result and reports a hash of it through its exit path.
  const int nranks = 8;
  const size_t bytes = 4096;
  UniqueId id;
  std::string err;
  ASSERT_EQ(makeUniqueId(Options{}, &id).into(&err), arfuseSuccess) << err;
  int pipes[nranks][2];
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    ASSERT_EQ(::pipe(pipes[r]), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto mine = blobFor(r, bytes);
      std::vector<uint8_t> all;
      std::string e;
      arfuseResult_t res = allGather(id, r, nranks, mine.data(), bytes, &all, shortOptions(8000)).into(&e);
      uint32_t h = 2166136261u;
      for (uint8_t x : all) h = (h ^ x) * 16777619u;
      uint32_t msg[2] = {static_cast<uint32_t>(res), h};
      if (::write(pipes[r][1], msg, sizeof(msg)) != sizeof(msg)) _exit(3);
      _exit(res == arfuseSuccess && all == expectedAll(nranks, bytes) ? 0 : 1);
    }
    ::close(pipes[r][1]);
    pids.push_back(pid);
  }
  closeListener(id);  // the parent is not a rank; rank 0's child holds its own copy
  const auto expected = expectedAll(nranks, bytes);
  uint32_t hExpected = 2166136261u;
  for (uint8_t x : expected) hExpected = (hExpected ^ x) * 16777619u;
  Stopwatch sw;
  for (int r = 0; r < nranks; ++r) {
    int status = -1;
    // Bounded wait: a hung child is killed and fails the test instead of hanging it.
    while (::waitpid(pids[r], &status, WNOHANG) == 0) {
      if (sw.seconds() > 15) {
        ::kill(pids[r], SIGKILL);
        ::waitpid(pids[r], &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    uint32_t msg[2] = {99, 0};
    ASSERT_EQ(::read(pipes[r][0], msg, sizeof(msg)), static_cast<ssize_t>(sizeof(msg))) << "rank " << r;
    ::close(pipes[r][0]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r;
    EXPECT_EQ(msg[0], 0u) << "rank " << r;
    EXPECT_EQ(msg[1], hExpected) << "rank " << r;
  }
  EXPECT_LT(sw.seconds(), 10.0);
}

}  // namespace
}  // namespace bootstrap
}  // namespace arfuse
