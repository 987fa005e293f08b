// The host conversions that the GPU tests' references rely on.
#include "harness/numeric.h"

#include <gtest/gtest.h>

namespace arfuse {
namespace {

using namespace numeric;

TEST(Numeric, Bf16RoundsToNearestEven) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(floatToBf16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(floatToBf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_EQ(floatToBf16(-2.5f), 0xc020);
}

TEST(Numeric, Fp16MatchesKnownEncodings) {
  EXPECT_EQ(floatToFp16(1.0f), 0x3c00);
  EXPECT_EQ(floatToFp16(-2.0f), 0xc000);
  EXPECT_EQ(floatToFp16(65504.f), 0x7bff);
  EXPECT_EQ(floatToFp16(1e6f), 0x7c00);
  EXPECT_EQ(floatToFp16(5.960464477539063e-8f), 0x0001);  // smallest subnormal
  EXPECT_EQ(floatToFp16(1.0f + 1.0f / 2048), 0x3c00);     // tie to even
  EXPECT_EQ(floatToFp16(1.0f + 3.0f / 2048), 0x3c02);
  for (uint32_t h = 0; h < 0x7c00; h += 7) EXPECT_EQ(floatToFp16(fp16ToFloat(h)), h) << h;
}

TEST(Numeric, RoundTripThroughBuffers) {
  uint16_t buf[4];
  store(buf, 1, 0.333333f, arfuseBfloat16);
  EXPECT_NEAR(load(buf, 1, arfuseBfloat16), 0.333333f, 2e-3);
  store(buf, 2, 0.333333f, arfuseFloat16);
  EXPECT_NEAR(load(buf, 2, arfuseFloat16), 0.333333f, 2e-4);
  EXPECT_EQ(round(0.1f, arfuseFloat32), 0.1f);
}

}  // namespace
}  // namespace arfuse
