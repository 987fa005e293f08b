// The unique id: what makeUniqueId writes, the serialised forms, and the errors for corrupt ids and
// bad listen addresses.
#include <gtest/gtest.h>
#include <net/if.h>

#include "bootstrap/bootstrap.h"
#include "test_util.h"

namespace arfuse {
namespace bootstrap {
namespace {

using testing::deadLoopbackPort;
using testing::loopbackInfo;

TEST(BootstrapUniqueId, DefaultIsAnAbstractUnixSocketOwnedByThisUser) {
  UniqueId a, b;
  std::string err;
  size_t before = listenerCount();
  ASSERT_EQ(makeUniqueId(Options{}, &a).into(&err), arfuseSuccess) << err;
  ASSERT_EQ(makeUniqueId(Options{}, &b).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(listenerCount(), before + 2);
  IdInfo ia, ib;
  ASSERT_EQ(decodeUniqueId(a, &ia).into(&err), arfuseSuccess) << err;
  ASSERT_EQ(decodeUniqueId(b, &ib).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(ia.family, AF_UNIX);
  EXPECT_EQ(ia.port, 0);
  EXPECT_EQ(ia.scopeId, static_cast<uint32_t>(geteuid()));
  EXPECT_NE(std::memcmp(ia.address, ib.address, 16), 0);
  EXPECT_NE(std::memcmp(ia.secret, ib.secret, 32), 0);
  EXPECT_NE(ia.nonce, ib.nonce);
  EXPECT_EQ(idAddress(ia).rfind("unix:@arfuse-", 0), 0u) << idAddress(ia);
  EXPECT_EQ(idAddress(ia).size(), std::string("unix:@arfuse-").size() + 32);
  closeListener(a);
  closeListener(b);
  EXPECT_EQ(listenerCount(), before);
}

TEST(BootstrapUniqueId, MakeDescribesALoopbackListener) {
  UniqueId a, b;
  std::string err;
  size_t before = listenerCount();
  ASSERT_EQ(makeUniqueId(testing::tcpOptions(30000), &a).into(&err), arfuseSuccess) << err;
  ASSERT_EQ(makeUniqueId(testing::tcpOptions(30000), &b).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(listenerCount(), before + 2);
  IdInfo ia, ib;
  ASSERT_EQ(decodeUniqueId(a, &ia).into(&err), arfuseSuccess) << err;
  ASSERT_EQ(decodeUniqueId(b, &ib).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(ia.family, AF_INET);
  EXPECT_EQ(ia.address[0], 127);
  EXPECT_EQ(ia.address[3], 1);
  EXPECT_NE(ia.port, 0);
  EXPECT_NE(ia.port, ib.port);
  EXPECT_NE(ia.nonce, 0u);
  EXPECT_NE(ia.nonce, ib.nonce);
  EXPECT_EQ(idAddress(ia), "127.0.0.1:" + std::to_string(ia.port));
  closeListener(a);
  EXPECT_EQ(listenerCount(), before + 1);
  closeListener(b);
  EXPECT_EQ(listenerCount(), before);
}

TEST(BootstrapUniqueId, Ipv6LoopbackAndInterfaceName) {
  UniqueId id;
  std::string err;
  Options v6;
  v6.address = "::1";
  if (makeUniqueId(v6, &id).into(&err) != arfuseSuccess) GTEST_SKIP() << "no IPv6 loopback here: " << err;
  IdInfo info;
  ASSERT_EQ(decodeUniqueId(id, &info).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(info.family, AF_INET6);
  EXPECT_EQ(info.address[15], 1);
  EXPECT_EQ(idAddress(info), "[::1]:" + std::to_string(info.port));
  closeListener(id);

  if (if_nametoindex("lo") == 0) GTEST_SKIP() << "no interface named lo";
  Options lo;
  lo.address = "lo";
  ASSERT_EQ(makeUniqueId(lo, &id).into(&err), arfuseSuccess) << err;
  ASSERT_EQ(decodeUniqueId(id, &info).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(info.family, AF_INET);
  EXPECT_EQ(idAddress(info), "127.0.0.1:" + std::to_string(info.port));
  closeListener(id);
}

TEST(BootstrapUniqueId, BadListenAddressesAreNamed) {
  UniqueId id;
  std::string err;
  Options o;
  o.address = "0.0.0.0";
  EXPECT_EQ(makeUniqueId(o, &id).into(&err), arfuseInvalidArgument);
  EXPECT_NE(err.find("'0.0.0.0' is a wildcard"), std::string::npos) << err;
  o.address = "no-such-if9";
  EXPECT_EQ(makeUniqueId(o, &id).into(&err), arfuseInvalidArgument);
  EXPECT_NE(err.find("'no-such-if9' is neither an IP address nor a network interface"), std::string::npos) << err;
  o.address = "127.0.0.1";
  o.port = 70000;
  EXPECT_EQ(makeUniqueId(o, &id).into(&err), arfuseInvalidArgument);
  EXPECT_NE(err.find("port 70000 is out of range"), std::string::npos) << err;

  // A port already taken: the message names the address and says what to do.
  UniqueId first;
  ASSERT_EQ(makeUniqueId(testing::tcpOptions(30000), &first).into(&err), arfuseSuccess) << err;
  o.port = testing::portOf(first);
  EXPECT_EQ(makeUniqueId(o, &id).into(&err), arfuseSystemError);
  EXPECT_NE(err.find("rank 0 could not listen on 127.0.0.1:" + std::to_string(o.port)), std::string::npos) << err;
  EXPECT_NE(err.find("pick another port"), std::string::npos) << err;
  closeListener(first);
}

TEST(BootstrapUniqueId, HexAndBytesRoundTrip) {
  UniqueId id, back;
  std::string err;
  ASSERT_EQ(encodeUniqueId(loopbackInfo(41234, 0x1122334455667788ull), &id).into(&err), arfuseSuccess) << err;
  std::string hex = uniqueIdToHex(id);
  ASSERT_EQ(hex.size(), 256u);
  EXPECT_EQ(hex.substr(0, 8), "41524944");  // the magic, "ARID"
  ASSERT_EQ(uniqueIdFromHex(hex, &back).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(std::memcmp(id.bytes, back.bytes, kUniqueIdBytes), 0);
  IdInfo info;
  ASSERT_EQ(decodeUniqueId(back, &info).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(info.port, 41234);
  EXPECT_EQ(info.nonce, 0x1122334455667788ull);

  ASSERT_EQ(uniqueIdFromBytes(id.bytes, kUniqueIdBytes, &back).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(uniqueIdFromBytes(id.bytes, 100, &back).into(&err), arfuseInvalidArgument);
  EXPECT_NE(err.find("exactly 128 bytes, got 100"), std::string::npos) << err;
  EXPECT_EQ(uniqueIdFromHex(hex.substr(0, 200), &back).into(&err), arfuseInvalidArgument);
  EXPECT_NE(err.find("256 hex digits, got 200"), std::string::npos) << err;
  std::string bad = hex;
  bad[10] = 'z';
  EXPECT_EQ(uniqueIdFromHex(bad, &back).into(&err), arfuseInvalidArgument);
  EXPECT_NE(err.find("non-hex character at position 10"), std::string::npos) << err;
}

TEST(BootstrapUniqueId, CorruptionIsReported) {
  UniqueId id;
  std::string err;
  ASSERT_EQ(encodeUniqueId(loopbackInfo(5000, 42), &id).into(&err), arfuseSuccess) << err;

  UniqueId zero{};
  EXPECT_EQ(decodeUniqueId(zero, nullptr).into(&err), arfuseInvalidArgument);
  EXPECT_NE(err.find("all zeros"), std::string::npos) << err;

  UniqueId magic = id;
  magic.bytes[0] ^= 0xff;
  EXPECT_EQ(decodeUniqueId(magic, nullptr).into(&err), arfuseInvalidArgument);
  EXPECT_NE(err.find("bad magic"), std::string::npos) << err;

  // Every single-bit flip outside the magic is caught (by version check or checksum).
  for (size_t byte = 4; byte < kUniqueIdBytes; ++byte) {
    UniqueId flipped = id;
    flipped.bytes[byte] ^= 0x10;
    EXPECT_EQ(decodeUniqueId(flipped, nullptr).into(&err), arfuseInvalidArgument) << "byte " << byte;
  }
  UniqueId port = id;
  port.bytes[8] ^= 1;
  EXPECT_EQ(decodeUniqueId(port, nullptr).into(&err), arfuseInvalidArgument);
  EXPECT_NE(err.find("checksum mismatch"), std::string::npos) << err;

  UniqueId version = id;
  version.bytes[4] = 9;
  EXPECT_EQ(decodeUniqueId(version, nullptr).into(&err), arfuseInvalidArgument);
  EXPECT_NE(err.find("format version 9 but this arfuse reads version 2"), std::string::npos) << err;

  EXPECT_EQ(encodeUniqueId(loopbackInfo(0, 42), &id).into(&err), arfuseInvalidArgument);
  EXPECT_EQ(encodeUniqueId(loopbackInfo(5000, 0), &id).into(&err), arfuseInvalidArgument);
}

TEST(BootstrapUniqueId, CorruptIdFailsAllGatherAtOnce) {
  UniqueId id;
  std::string err;
  ASSERT_EQ(encodeUniqueId(loopbackInfo(deadLoopbackPort(), 7), &id).into(&err), arfuseSuccess) << err;
  id.bytes[80] = 1;  // a reserved byte
  Options o;
  o.timeoutMs = 2000;
  std::vector<uint8_t> all;
  uint8_t mine[4] = {1, 2, 3, 4};
  testing::Stopwatch sw;
  EXPECT_EQ(allGather(id, 1, 2, mine, 4, &all, o).into(&err), arfuseInvalidArgument);
  EXPECT_NE(err.find("unique id is corrupt"), std::string::npos) << err;
  EXPECT_LT(sw.seconds(), 0.5);
}

}  // namespace
}  // namespace bootstrap
}  // namespace arfuse
