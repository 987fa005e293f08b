// The JSON reader on inputs built to be slow (issue 37 item 1). Each case runs in a child process
// under an alarm: the bound is generous (seconds for work that takes milliseconds) and is not a
// speed target, it catches a quadratic coming back.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "../hostile_util.h"
#include "topo/json.h"

namespace arfuse {
namespace topo {
namespace {

using hostile::finishesWithin;

// libstdc++'s std::hash<std::string> on 64-bit targets (_Hash_bytes, a MurmurHash2 variant) mixes
// each 8-byte block with an invertible function and ends with an invertible mix, so the last block
// of a key can be solved for any wanted hash: keys of 24 bytes, two free blocks and a solved one,
// all with the same hash. (fuzz/attacks/gen.py json-collide writes the same keys into a file.)
constexpr uint64_t kMul = (uint64_t{0xc6a4a793} << 32) + 0x5bd1e995;
constexpr uint64_t kSeed = 0xc70f6907;
uint64_t shiftMix(uint64_t v) { return v ^ (v >> 47); }  // its own inverse (2 x 47 > 64)
uint64_t inverseOf(uint64_t m) {
  uint64_t x = m;  // Newton: each step doubles the correct low bits
  for (int i = 0; i < 6; ++i) x *= 2 - m * x;
  return x;
}
uint64_t mixBlock(uint64_t k) { return shiftMix(k * kMul) * kMul; }
uint64_t unmixBlock(uint64_t d) {
  const uint64_t inv = inverseOf(kMul);
  return shiftMix(d * inv) * inv;
}
uint64_t load8(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(p[i]);
  return v;
}

std::string collidingKey(uint64_t i, uint64_t target) {
  char head[17];
  std::snprintf(head, sizeof head, "%016llx", static_cast<unsigned long long>(i));
  uint64_t h = kSeed ^ (24 * kMul);
  for (int j = 0; j < 16; j += 8) h = (h ^ mixBlock(load8(head + j))) * kMul;
  const uint64_t inv = inverseOf(kMul);
  const uint64_t beforeFinal = shiftMix(shiftMix(target) * inv);
  const uint64_t last = unmixBlock((beforeFinal * inv) ^ h);
  std::string key(head, 16);
  for (int b = 0; b < 8; ++b) key.push_back(static_cast<char>(last >> (8 * b)));
  return key;
}

std::string jsonKey(const std::string& k) {
  std::string o = "\"";
  for (char c : k) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (u < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", u);
      o += b;
    } else {
      o += c;
    }
  }
  return o + "\"";
}

// 60000 keys of one std::hash value (1.9 MB): an unseeded hash set of the keys seen so far walks
// one chain of every key before each insert (1.8e9 steps, tens of seconds); the reader must stay
// near-linear whatever the keys are.
// One escape table serves the reader and the writer: every two-character escape reads back as its
// character, the writer spells each character one way (no "\/", \u00XX for the controls without a
// letter), and what it writes reads back as the original string.
TEST(JsonHostile, EscapesReadAndWriteOneWay) {
  json::Value v;
  std::string err;
  ASSERT_EQ(json::parse(R"("q\"b\\s\/x\by\fz\nr\rt\tu\u0001")", &v).into(&err), arfuseSuccess) << err;
  const std::string raw = "q\"b\\s/x\by\fz\nr\rt\tu\x01";
  EXPECT_EQ(v.text, raw);
  std::string written;
  json::appendString(&written, raw);
  EXPECT_EQ(written, R"("q\"b\\s/x\by\fz\nr\rt\tu\u0001")");
  ASSERT_EQ(json::parse(written, &v).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(v.text, raw);
  EXPECT_NE(json::parse(R"("\q")", &v).into(&err), arfuseSuccess);
  EXPECT_NE(err.find("invalid escape '\\q'"), std::string::npos) << err;
}

TEST(JsonHostile, KeysOfOneHashValueStayFast) {
  const uint64_t target = 0x0123456789abcdefull;
  if (std::hash<std::string>{}(collidingKey(1, target)) != target ||
      std::hash<std::string>{}(collidingKey(2, target)) != target)
    GTEST_SKIP() << "SKIPPED: this standard library's std::hash<std::string> is not libstdc++'s _Hash_bytes, so "
                    "these keys do not collide here";
  const int n = 60000;
  std::string doc = "{";
  for (int i = 0; i < n; ++i) doc += (i ? "," : "") + jsonKey(collidingKey(i + 1, target)) + ":0";
  doc += "}";
  double took = 0;
  const bool ok = finishesWithin(
      10,
      [&] {
        json::Value v;
        return json::parse(doc, &v).ok() && v.members.size() == static_cast<size_t>(n);
      },
      &took);
  std::printf("[ hostile ] %d colliding keys (%zu bytes): %.2f s\n", n, doc.size(), took);
  EXPECT_TRUE(ok) << "parsing did not finish within 10 s (or failed): quadratic in colliding keys";
  // The same keys twice: the duplicate is still found, at its own position.
  json::Value v;
  std::string err;
  const std::string dup = "{" + jsonKey(collidingKey(1, target)) + ":0,\n" + jsonKey(collidingKey(2, target)) +
                          ":1,\n" + jsonKey(collidingKey(1, target)) + ":2}";
  EXPECT_NE(json::parse(dup, &v).into(&err), arfuseSuccess);
  EXPECT_EQ(err.substr(0, 20), "3:1: duplicate key \"") << err;
}

}  // namespace
}  // namespace topo
}  // namespace arfuse
