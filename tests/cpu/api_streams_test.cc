// Stream identity (api/streams.h): what the handle a rank passes really is, and which pairs of
// streams two ranks sharing a GPU cannot use. The CUDA queries (flags, capture) are the library's
// seam; here they are given directly.
#include <gtest/gtest.h>

#include <thread>

#include "api/streams.h"

namespace arfuse {
namespace {

constexpr int kNonBlocking = 0x1;  // cudaStreamNonBlocking

TEST(Streams, PerThreadStreamIsOnePerThreadAndDevice) {
  const StreamIdentity a = resolveStream(kPerThreadHandle, 0, 1, -1);
  const StreamIdentity sameThread = resolveStream(kPerThreadHandle, 0, 1, -1);
  const StreamIdentity otherThread = resolveStream(kPerThreadHandle, 0, 2, -1);
  const StreamIdentity otherDevice = resolveStream(kPerThreadHandle, 1, 1, -1);
  EXPECT_NE(streamConflict(a, sameThread).find("per-thread default stream of host thread 1 on device 0"),
            std::string::npos)
      << streamConflict(a, sameThread);
  EXPECT_EQ(streamConflict(a, otherThread), "") << "two threads' per-thread streams are distinct streams";
  EXPECT_EQ(streamConflict(a, otherDevice), "") << "a stream of another device never queues behind this one";
}

TEST(Streams, ZeroAndCudaStreamLegacyAreTheOneLegacyStreamOfADevice) {
  const StreamIdentity zero = resolveStream(0, 0, 1, -1);
  const StreamIdentity legacy = resolveStream(kLegacyHandle, 0, 2, -1);
  EXPECT_NE(streamConflict(zero, legacy).find("legacy default stream of device 0"), std::string::npos);
  EXPECT_EQ(streamConflict(zero, resolveStream(0, 1, 1, -1)), "");
}

TEST(Streams, LegacyStreamSerialisesWithBlockingStreamsOnly) {
  const StreamIdentity legacy = resolveStream(0, 0, 1, -1);
  const StreamIdentity blocking = resolveStream(0x5000, 0, 2, 0);
  const StreamIdentity nonBlocking = resolveStream(0x6000, 0, 2, kNonBlocking);
  const StreamIdentity perThread = resolveStream(kPerThreadHandle, 0, 2, -1);
  const StreamIdentity captured = resolveStream(0x7000, 0, 2, -1);  // flags not read while capturing
  EXPECT_NE(streamConflict(legacy, blocking).find("legacy default stream of device 0"), std::string::npos);
  EXPECT_NE(streamConflict(blocking, legacy).find("(blocking)"), std::string::npos) << "either order";
  EXPECT_NE(streamConflict(legacy, perThread), "") << "the per-thread stream synchronises with the legacy one";
  EXPECT_EQ(streamConflict(legacy, nonBlocking), "");
  EXPECT_EQ(streamConflict(legacy, captured), "");
  EXPECT_EQ(streamConflict(blocking, resolveStream(0x5001, 0, 2, 0)), "") << "two created streams never serialise";
}

TEST(Streams, CreatedStreamsCompareByHandle) {
  const StreamIdentity s = resolveStream(0x5000, 0, 1, kNonBlocking);
  EXPECT_NE(streamConflict(s, resolveStream(0x5000, 0, 9, kNonBlocking)).find("both use stream 0x5000"),
            std::string::npos);
  EXPECT_EQ(streamConflict(s, StreamIdentity{}), "") << "a rank with no call yet conflicts with nothing";
}

TEST(Streams, HostThreadKeysDiffer) {
  const uint64_t mine = hostThreadKey();
  uint64_t other = mine;
  std::thread([&other] { other = hostThreadKey(); }).join();
  EXPECT_NE(mine, other);
  EXPECT_EQ(mine, hostThreadKey());
}

}  // namespace
}  // namespace arfuse
