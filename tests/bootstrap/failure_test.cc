// Rendezvous failures: each one bounded by a short timeout, checked for its class, its message (the
// address, the rank(s), what to check) and its elapsed time. Loopback only.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "bootstrap/bootstrap.h"
#include "test_util.h"

namespace arfuse {
namespace bootstrap {
namespace {

using namespace testing;  // NOLINT: test helpers

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(BootstrapFailure, RankZeroNeverAppears) {
  uint16_t port = deadLoopbackPort();
  UniqueId id;
  std::string err;
  ASSERT_EQ(encodeUniqueId(loopbackInfo(port, 1234), &id).into(&err), arfuseSuccess) << err;
  Stopwatch sw;
  RankOutcome o = launch(id, 3, 4, 16, shortOptions(700)).get();
  double t = sw.seconds();
  EXPECT_EQ(o.result, arfusePeerTimeout);
  EXPECT_EQ(o.error, "rank 3 could not connect to 127.0.0.1:" + std::to_string(port) +
                         " after 0.7 s: connection refused; is rank 0 alive and is the address reachable from this "
                         "host?");
  EXPECT_GE(t, 0.65);
  EXPECT_LT(t, 2.0);
  EXPECT_TRUE(o.all.empty());
}

TEST(BootstrapFailure, MissingRankTimesOutAtRankZeroAndEveryoneHearsWhy) {
  UniqueId id;
  std::string err;
  ASSERT_EQ(makeUniqueId(Options{}, &id).into(&err), arfuseSuccess) << err;
  const std::string where = whereOf(id);
  Stopwatch sw;
  // Rank 1 waits longer than rank 0 so that it receives rank 0's verdict instead of its own timeout.
  auto r0 = launch(id, 0, 4, 32, shortOptions(800));
  auto r1 = launch(id, 1, 4, 32, shortOptions(3000));
  RankOutcome o0 = r0.get(), o1 = r1.get();
  double t = sw.seconds();
  EXPECT_EQ(o0.result, arfusePeerTimeout);
  EXPECT_TRUE(has(o0.error, "rank 0 at " + where + " waited 0.8 s but only 2 of 4 ranks joined (missing ranks 2, 3)"))
      << o0.error;
  EXPECT_TRUE(has(o0.error, "can reach " + where)) << o0.error;
  EXPECT_EQ(o1.result, arfusePeerTimeout);
  EXPECT_EQ(o1.error, o0.error);
  EXPECT_LT(t, 2.0);
}

TEST(BootstrapFailure, RankZeroGoneQuietTimesOutAtThePeer) {
  // A fake rank 0 that accepts and reads but never answers.
  uint16_t port;
  int lfd = rawListen(&port);
  UniqueId id;
  std::string err;
  ASSERT_EQ(encodeUniqueId(loopbackInfo(port, 77), &id).into(&err), arfuseSuccess) << err;
  Stopwatch sw;
  auto peer = launch(id, 2, 3, 8, shortOptions(600));
  int fd = rawAccept(lfd);
  RankOutcome o = peer.get();
  EXPECT_EQ(o.result, arfusePeerTimeout);
  EXPECT_TRUE(has(o.error, "rank 2 waited 0.6 s for rank 0 at 127.0.0.1:" + std::to_string(port) + " to greet it"))
      << o.error;
  EXPECT_LT(sw.seconds(), 2.0);
  ::close(fd);
  ::close(lfd);
}

TEST(BootstrapFailure, NranksDisagreement) {
  UniqueId id;
  std::string err;
  ASSERT_EQ(makeUniqueId(Options{}, &id).into(&err), arfuseSuccess) << err;
  Stopwatch sw;
  auto r0 = launch(id, 0, 4, 16, shortOptions(3000));
  auto r1 = launch(id, 1, 4, 16, shortOptions(3000));
  auto r3 = launch(id, 3, 8, 16, shortOptions(3000), /*delayMs=*/200);  // after rank 1 has joined
  RankOutcome o0 = r0.get(), o1 = r1.get(), o3 = r3.get();
  const std::string want = "rank 3 said nranks=8 but rank 0 expects 4; every rank must pass the same nranks";
  EXPECT_EQ(o0.result, arfuseMismatch);
  EXPECT_EQ(o0.error, want);
  EXPECT_EQ(o1.result, arfuseMismatch);
  EXPECT_EQ(o1.error, want);
  EXPECT_EQ(o3.result, arfuseMismatch);
  EXPECT_EQ(o3.error, want);
  EXPECT_LT(sw.seconds(), 2.0);
}

TEST(BootstrapFailure, DuplicateRank) {
  UniqueId id;
  std::string err;
  ASSERT_EQ(makeUniqueId(Options{}, &id).into(&err), arfuseSuccess) << err;
  Stopwatch sw;
  auto r0 = launch(id, 0, 3, 16, shortOptions(3000));
  auto a = launch(id, 2, 3, 16, shortOptions(3000));
  auto b = launch(id, 2, 3, 16, shortOptions(3000), 200);
  RankOutcome o0 = r0.get(), oa = a.get(), ob = b.get();
  EXPECT_EQ(o0.result, arfuseMismatch);
  EXPECT_TRUE(has(o0.error, "ranks 2 and 2 both joined (from pid ")) << o0.error;
  EXPECT_TRUE(has(o0.error, "every process must pass a distinct rank")) << o0.error;
  EXPECT_EQ(oa.error, o0.error);
  EXPECT_EQ(ob.error, o0.error);
  EXPECT_LT(sw.seconds(), 2.0);
}

TEST(BootstrapFailure, OutOfRangeRankLocallyAndAtRankZero) {
  UniqueId id;
  std::string err;
  ASSERT_EQ(makeUniqueId(Options{}, &id).into(&err), arfuseSuccess) << err;
  std::vector<uint8_t> all;
  uint8_t mine[4] = {};
  EXPECT_EQ(allGather(id, 4, 4, mine, 4, &all, shortOptions(500)).into(&err), arfuseInvalidArgument);
  EXPECT_EQ(err, "rank 4 is out of range for nranks=4 (valid ranks are 0-3)");
  EXPECT_EQ(allGather(id, -1, 4, mine, 4, &all, shortOptions(500)).into(&err), arfuseInvalidArgument);
  EXPECT_EQ(allGather(id, 0, 0, mine, 4, &all, shortOptions(500)).into(&err), arfuseInvalidArgument);
  EXPECT_EQ(err, "nranks=0 is out of range (1-65536)");

  // A process that holds the id but skipped the local check (another release, a bug) is caught by
  // rank 0 (the id above was consumed by the rank-0 call that failed its own check).
  ASSERT_EQ(makeUniqueId(Options{}, &id).into(&err), arfuseSuccess) << err;
  Stopwatch sw;
  auto r0 = launch(id, 0, 4, 4, shortOptions(3000));
  int fd = rawConnectId(id);
  ASSERT_GE(fd, 0);
  uint8_t challenge[16];
  ASSERT_TRUE(readChallenge(fd, challenge));
  auto hello = authHello(infoOf(id), challenge, 9, 4, std::vector<uint8_t>(4, 0));
  ASSERT_EQ(::send(fd, hello.data(), hello.size(), 0), static_cast<ssize_t>(hello.size()));
  RankOutcome o0 = r0.get();
  EXPECT_EQ(o0.result, arfuseMismatch);
  EXPECT_TRUE(has(o0.error, ") joined as rank 9 but valid ranks are 0-3")) << o0.error;
  // The offender is told too: an error frame (kind 3) whose text is the same sentence.
  EXPECT_EQ(readErrorText(fd), o0.error);
  ::close(fd);
  EXPECT_LT(sw.seconds(), 2.0);
}

TEST(BootstrapFailure, BlobSizeDisagreement) {
  UniqueId id;
  std::string err;
  ASSERT_EQ(makeUniqueId(Options{}, &id).into(&err), arfuseSuccess) << err;
  Stopwatch sw;
  auto r0 = launch(id, 0, 2, 16, shortOptions(3000));
  auto r1 = launch(id, 1, 2, 1 << 20, shortOptions(3000));  // large, so it is still sending when rejected
  RankOutcome o0 = r0.get(), o1 = r1.get();
  EXPECT_EQ(o0.result, arfuseMismatch);
  EXPECT_TRUE(has(o0.error, "sent a 1048576-byte blob but rank 0's is 16 bytes; every rank must pass the same size"))
      << o0.error;
  EXPECT_EQ(o1.result, arfuseMismatch);
  EXPECT_EQ(o1.error, o0.error);
  EXPECT_LT(sw.seconds(), 2.0);
}

TEST(BootstrapFailure, IdOfAnotherSessionIsTurnedAwayAndTheRealSessionCompletes) {
  UniqueId id, stale;
  std::string err;
  ASSERT_EQ(makeUniqueId(Options{}, &id).into(&err), arfuseSuccess) << err;
  // Same address, different nonce and secret: what a rank holding last run's id would dial.
  IdInfo old = infoOf(id);
  old.nonce ^= 1;
  old.secret[0] ^= 1;
  ASSERT_EQ(encodeUniqueId(old, &stale).into(&err), arfuseSuccess) << err;
  Stopwatch sw;
  auto r0 = launch(id, 0, 2, 64, shortOptions(3000));
  RankOutcome os = launch(stale, 1, 2, 64, shortOptions(3000)).get();
  EXPECT_EQ(os.result, arfuseMismatch);
  EXPECT_TRUE(has(os.error, "rank 1: the rendezvous at " + whereOf(id) + " belongs to another session")) << os.error;
  RankOutcome o1 = launch(id, 1, 2, 64, shortOptions(3000)).get();
  RankOutcome o0 = r0.get();
  ASSERT_EQ(o0.result, arfuseSuccess) << o0.error;
  ASSERT_EQ(o1.result, arfuseSuccess) << o1.error;
  EXPECT_EQ(o0.all, expectedAll(2, 64));
  EXPECT_EQ(o1.all, o0.all);
  EXPECT_LT(sw.seconds(), 2.0);
}

TEST(BootstrapFailure, GarbagePeerIsDroppedAndNamedIfTheSessionThenTimesOut) {
  UniqueId id;
  std::string err;
  ASSERT_EQ(makeUniqueId(Options{}, &id).into(&err), arfuseSuccess) << err;
  auto r0 = launch(id, 0, 2, 8, shortOptions(3000));
  int g = rawConnectId(id);
  ASSERT_GE(g, 0);
  const char junk[] = "GET / HTTP/1.0\r\nHost: localhost\r\n\r\n";
  ASSERT_EQ(::send(g, junk, sizeof(junk), 0), static_cast<ssize_t>(sizeof(junk)));
  RankOutcome o1 = launch(id, 1, 2, 8, shortOptions(3000), 100).get();
  RankOutcome o0 = r0.get();
  ASSERT_EQ(o0.result, arfuseSuccess) << o0.error;
  ASSERT_EQ(o1.result, arfuseSuccess) << o1.error;
  EXPECT_EQ(o1.all, expectedAll(2, 8));
  ::close(g);

  // Same garbage, but the real rank never comes: the timeout says what else was seen.
  ASSERT_EQ(makeUniqueId(Options{}, &id).into(&err), arfuseSuccess) << err;
  Stopwatch sw;
  auto lone = launch(id, 0, 2, 8, shortOptions(700));
  g = rawConnectId(id);
  ASSERT_GE(g, 0);
  ASSERT_EQ(::send(g, junk, sizeof(junk), 0), static_cast<ssize_t>(sizeof(junk)));
  RankOutcome o = lone.get();
  EXPECT_EQ(o.result, arfusePeerTimeout);
  EXPECT_TRUE(has(o.error, "only 1 of 2 ranks joined (missing rank 1)")) << o.error;
  EXPECT_TRUE(has(o.error, "that did not speak this arfuse rendezvous protocol")) << o.error;
  EXPECT_LT(sw.seconds(), 2.0);
  ::close(g);
}

TEST(BootstrapFailure, PeerDisconnectsMidMessage) {
  UniqueId id;
  std::string err;
  ASSERT_EQ(makeUniqueId(Options{}, &id).into(&err), arfuseSuccess) << err;
  Stopwatch sw;
  auto r0 = launch(id, 0, 3, 4096, shortOptions(3000));
  auto r2 = launch(id, 2, 3, 4096, shortOptions(3000));
  int fd = rawConnectId(id);
  ASSERT_GE(fd, 0);
  uint8_t challenge[16];
  ASSERT_TRUE(readChallenge(fd, challenge));
  auto hello = authHello(infoOf(id), challenge, 1, 3, std::vector<uint8_t>(4096, 0xab));
  hello.resize(32 + 32 + 100);  // the authenticated header, then 100 bytes of the blob
  ASSERT_EQ(::send(fd, hello.data(), hello.size(), 0), static_cast<ssize_t>(hello.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::close(fd);
  RankOutcome o0 = r0.get(), o2 = r2.get();
  EXPECT_EQ(o0.result, arfuseSystemError);
  EXPECT_TRUE(has(o0.error, "rank 1 (from pid ")) << o0.error;
  EXPECT_TRUE(has(o0.error, ") disconnected after 100 of 4096 bytes of its blob; did that process crash?")) << o0.error;
  EXPECT_EQ(o2.result, arfuseSystemError);
  EXPECT_EQ(o2.error, o0.error);
  EXPECT_LT(sw.seconds(), 2.0);
}

TEST(BootstrapFailure, RankZeroDisconnectsMidAnswer) {
  uint16_t port;
  int lfd = rawListen(&port);
  UniqueId id;
  std::string err;
  ASSERT_EQ(encodeUniqueId(loopbackInfo(port, 55), &id).into(&err), arfuseSuccess) << err;
  Stopwatch sw;
  auto peer = launch(id, 1, 2, 1000, shortOptions(3000));
  int fd = rawAccept(lfd);
  ASSERT_GE(fd, 0);
  const uint8_t challenge[16] = {1, 2, 3};
  ASSERT_TRUE(sendChallenge(fd, 55, challenge));
  std::vector<uint8_t> hello(32 + 32 + 1000 + 32);
  ASSERT_TRUE(readExactly(fd, hello.data(), hello.size()));
  auto answer = helloFrame(0, 2, 55, 2000, /*kind=*/2);
  answer.insert(answer.end(), 700, 0);
  ASSERT_EQ(::send(fd, answer.data(), answer.size(), 0), static_cast<ssize_t>(answer.size()));
  ::close(fd);
  RankOutcome o = peer.get();
  EXPECT_EQ(o.result, arfuseSystemError);
  EXPECT_EQ(o.error, "rank 1: the answer from rank 0 at 127.0.0.1:" + std::to_string(port) +
                         " stopped after 700 of 2032 bytes (connection closed); did rank 0 crash?");
  EXPECT_TRUE(o.all.empty());
  EXPECT_LT(sw.seconds(), 2.0);
  ::close(lfd);
}

TEST(BootstrapFailure, SomethingElseListeningOnThePort) {
  uint16_t port;
  int lfd = rawListen(&port);
  UniqueId id;
  std::string err;
  ASSERT_EQ(encodeUniqueId(loopbackInfo(port, 56), &id).into(&err), arfuseSuccess) << err;
  Stopwatch sw;
  auto peer = launch(id, 1, 2, 8, shortOptions(3000));
  int fd = rawAccept(lfd);
  ASSERT_GE(fd, 0);
  std::string banner = "SSH-2.0-OpenSSH_9.6\r\n.............";  // 32+ bytes of someone else's protocol
  ASSERT_GT(::send(fd, banner.data(), banner.size(), 0), 0);
  RankOutcome o = peer.get();
  EXPECT_EQ(o.result, arfuseMismatch);
  EXPECT_TRUE(has(
      o.error, "127.0.0.1:" + std::to_string(port) + " answered with something that is not an arfuse rendezvous frame"))
      << o.error;
  EXPECT_LT(sw.seconds(), 2.0);
  ::close(fd);
  ::close(lfd);
}

TEST(BootstrapFailure, ShutdownClosesEveryListener) {
  UniqueId a, b;
  std::string err;
  ASSERT_EQ(makeUniqueId(Options{}, &a).into(&err), arfuseSuccess) << err;
  ASSERT_EQ(makeUniqueId(Options{}, &b).into(&err), arfuseSuccess) << err;
  ASSERT_GE(listenerCount(), 2u);
  shutdown();
  EXPECT_EQ(listenerCount(), 0u);
  // Nothing listens any more: a peer is refused until its deadline.
  Stopwatch sw;
  RankOutcome o = launch(a, 1, 2, 8, shortOptions(300)).get();
  EXPECT_EQ(o.result, arfusePeerTimeout);
  EXPECT_TRUE(has(o.error, "connection refused")) << o.error;
  EXPECT_LT(sw.seconds(), 1.5);
}

}  // namespace
}  // namespace bootstrap
}  // namespace arfuse
