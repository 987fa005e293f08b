// The number formats of issue 9 (src/quant/formats.h) and the CPU reference (src/quant/reference.h).
//
// Two oracles that share no code with formats.h:
//   - brute force: the nearest of all finite codes (decoded with ldexp), ties to the even code,
//     computed in double;
//   - NVIDIA's host emulation of cvt.rn.satfinite.{e4m3x2,e2m1x2}.f32 in cuda_fp8.h / cuda_fp4.h
//     (__nv_cvt_float_to_fp8 / __nv_cvt_float_to_fp4 compiled for the host).
// ARFUSE_QUANT_EXHAUSTIVE=1 also runs every one of the 2^32 fp32 bit patterns through both
// conversions against the NVIDIA emulation (about 15 s in a Release build); otherwise it is skipped.
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cfloat>
#include <limits>
#include <random>
#include <vector>

#include "quant/formats.h"
#include "quant/reference.h"

namespace q = arfuse::quant;

namespace {

float f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
uint32_t u32(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

// Independent decoders (ldexp on the fields).
double decodeE4m3(int c) {
  const int e = (c >> 3) & 0xF, m = c & 7;
  const double mag = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 7 - 3);
  return (c & 0x80) ? -mag : mag;
}
double decodeE2m1(int c) {
  static const double kMag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (c & 8) ? -kMag[c & 7] : kMag[c & 7];
}

// Nearest finite code by brute force over all positive finite codes, ties to the even code; the sign
// is carried separately (so -0 and negatives rounding to 0 keep it). NaN and inf handled as the
// instruction does (documented in formats.h).
uint8_t bruteE4m3(float x) {
  if (isnan(x)) return 0x7F;
  const uint8_t sign = signbit(x) ? 0x80 : 0;
  const double a = fabs(static_cast<double>(x));
  if (a >= 448.0) return sign | 0x7E;  // satfinite (and, far out, the distances round equal in double)
  int best = 0;
  double bestD = INFINITY;
  for (int c = 0; c <= 0x7E; ++c) {
    const double d = fabs(a - decodeE4m3(c));
    if (d < bestD || (d == bestD && (c & 1) == 0)) best = c, bestD = d;
  }
  return static_cast<uint8_t>(sign | best);
}
uint8_t bruteE2m1(float x) {
  if (isnan(x)) return 0x7;
  const uint8_t sign = signbit(x) ? 0x8 : 0;
  const double a = fabs(static_cast<double>(x));
  if (a >= 6.0) return sign | 0x7;
  int best = 0;
  double bestD = INFINITY;
  for (int c = 0; c <= 7; ++c) {
    const double d = fabs(a - decodeE2m1(c));
    if (d < bestD || (d == bestD && (c & 1) == 0)) best = c, bestD = d;
  }
  return static_cast<uint8_t>(sign | best);
}

uint8_t nvE4m3(float x) { return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)); }
uint8_t nvE2m1(float x) { return static_cast<uint8_t>(__nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest)); }

bool sameFloat(float a, float b) { return (isnan(a) && isnan(b)) || u32(a) == u32(b); }

// Random fp32 inputs: half uniform over all bit patterns, half log-uniform magnitudes in
// [2^-14, 2^12) with random sign (the range where the formats have their codes).
std::vector<float> randomInputs(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> ex(-14.0, 12.0);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (i % 2 == 0) {
      v[i] = f32(static_cast<uint32_t>(rng()));
    } else {
      const float m = static_cast<float>(exp2(ex(rng)));
      v[i] = (rng() & 1) ? -m : m;
    }
  }
  return v;
}

}  // namespace

// ---------------------------------------------------------------- E4M3

TEST(QuantE4m3, DecodesEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const float f = q::e4m3ToFp32(static_cast<uint8_t>(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(isnan(f)) << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), decodeE4m3(c)) << c;
    EXPECT_EQ(signbit(f) != 0, (c & 0x80) != 0) << c;
  }
  EXPECT_EQ(q::e4m3ToFp32(0x7E), 448.0f);
  EXPECT_EQ(q::e4m3ToFp32(0xFE), -448.0f);
  EXPECT_EQ(q::e4m3ToFp32(0x01), 0x1p-9f);
  EXPECT_EQ(q::e4m3ToFp32(0x07), 7 * 0x1p-9f);
  EXPECT_EQ(q::e4m3ToFp32(0x08), 0x1p-6f);
  EXPECT_EQ(q::e4m3ToFp32(0x38), 1.0f);
  EXPECT_EQ(q::e4m3ToFp32(0x3C), 1.5f);
  EXPECT_EQ(u32(q::e4m3ToFp32(0x80)), 0x80000000u);  // -0
}

TEST(QuantE4m3, EncodesEveryCodeBack) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(q::fp32ToE4m3Sat(q::e4m3ToFp32(static_cast<uint8_t>(c))), c) << c;
  }
}

// Every midpoint between adjacent codes goes to the even code; one fp32 ulp either side goes to the
// nearer code. The midpoints have at most 5 significant bits: exact in fp32.
TEST(QuantE4m3, HalfwayPointsTieToEven) {
  for (int c = 0; c < 0x7E; ++c) {
    for (int sign : {0, 0x80}) {
      const float lo = static_cast<float>(decodeE4m3(c | sign)), hi = static_cast<float>(decodeE4m3((c + 1) | sign));
      const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
      ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2);
      const int even = (c % 2 == 0) ? c : c + 1;
      EXPECT_EQ(q::fp32ToE4m3Sat(mid), even | sign) << c;
      EXPECT_EQ(q::fp32ToE4m3Sat(nextafterf(mid, sign ? INFINITY : -INFINITY) /* toward lo */), c | sign) << c;
      EXPECT_EQ(q::fp32ToE4m3Sat(nextafterf(mid, sign ? -INFINITY : INFINITY) /* toward hi */), (c + 1) | sign) << c;
    }
  }
}

TEST(QuantE4m3, SaturatesSignedZeroNaN) {
  EXPECT_EQ(q::fp32ToE4m3Sat(448.0f), 0x7E);
  EXPECT_EQ(q::fp32ToE4m3Sat(456.0f), 0x7E);
  EXPECT_EQ(q::fp32ToE4m3Sat(464.0f), 0x7E);  // midpoint to the (absent) 480: even is 448
  EXPECT_EQ(q::fp32ToE4m3Sat(nextafterf(464.0f, INFINITY)), 0x7E);
  EXPECT_EQ(q::fp32ToE4m3Sat(1e6f), 0x7E);
  EXPECT_EQ(q::fp32ToE4m3Sat(FLT_MAX), 0x7E);
  EXPECT_EQ(q::fp32ToE4m3Sat(-FLT_MAX), 0xFE);
  EXPECT_EQ(q::fp32ToE4m3Sat(INFINITY), 0x7E);
  EXPECT_EQ(q::fp32ToE4m3Sat(-INFINITY), 0xFE);
  EXPECT_EQ(q::fp32ToE4m3Sat(0.0f), 0x00);
  EXPECT_EQ(q::fp32ToE4m3Sat(-0.0f), 0x80);
  EXPECT_EQ(q::fp32ToE4m3Sat(0x1p-10f), 0x00);  // half the smallest subnormal: tie to 0
  EXPECT_EQ(q::fp32ToE4m3Sat(-0x1p-10f), 0x80);
  EXPECT_EQ(q::fp32ToE4m3Sat(nextafterf(0x1p-10f, 1.0f)), 0x01);
  EXPECT_EQ(q::fp32ToE4m3Sat(3 * 0x1p-10f), 0x02);  // 1.5 steps: tie to even 2
  EXPECT_EQ(q::fp32ToE4m3Sat(FLT_TRUE_MIN), 0x00);
  EXPECT_EQ(q::fp32ToE4m3Sat(-FLT_TRUE_MIN), 0x80);
  EXPECT_EQ(q::fp32ToE4m3Sat(FLT_MIN), 0x00);
  EXPECT_EQ(q::fp32ToE4m3Sat(15 * 0x1p-10f), 0x08);  // between 7 * 2^-9 and 2^-6: even is 0x08
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0xFFC00000u, 0xFFFFFFFFu, 0x7FFFFFFFu}) {
    EXPECT_EQ(q::fp32ToE4m3Sat(f32(nan)), 0x7F) << std::hex << nan;
    EXPECT_EQ(nvE4m3(f32(nan)), 0x7F) << std::hex << nan;  // NVIDIA's emulation agrees: sign dropped
  }
  EXPECT_EQ(nvE4m3(-INFINITY), 0xFE);
  EXPECT_EQ(nvE4m3(-0.0f), 0x80);
}

TEST(QuantE4m3, MatchesBruteForceAndNvidiaOnRandomInputs) {
  const std::vector<float> in = randomInputs(4u << 20, 9);
  size_t bad = 0;
  for (float x : in) {
    const uint8_t got = q::fp32ToE4m3Sat(x);
    if (got != bruteE4m3(x) || got != nvE4m3(x)) {
      if (++bad < 10)
        ADD_FAILURE() << "x=" << x << " bits=" << std::hex << u32(x) << " got=" << int(got)
                      << " brute=" << int(bruteE4m3(x)) << " nv=" << int(nvE4m3(x));
    }
  }
  EXPECT_EQ(bad, 0u);
}

// Every fp32 whose magnitude is in [2^-12, 2^10) (all the codes, the subnormal range, saturation),
// both signs: each of the 2^23 mantissas of each binade against NVIDIA's emulation.
TEST(QuantE4m3, MatchesNvidiaOnEveryFloatNearTheRange) {
  size_t bad = 0, n = 0;
  for (uint32_t e = 127 - 12; e < 127 + 10; ++e) {
    for (uint32_t m = 0; m < (1u << 23); ++m) {
      for (uint32_t s : {0u, 0x80000000u}) {
        const float x = f32(s | e << 23 | m);
        ++n;
        if (q::fp32ToE4m3Sat(x) != nvE4m3(x) && ++bad < 10) ADD_FAILURE() << std::hex << u32(x);
      }
    }
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(n, 22u * 2 * (1u << 23));
}

// ---------------------------------------------------------------- E2M1

TEST(QuantE2m1, DecodesEveryCode) {
  const float kExpect[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_TRUE(sameFloat(q::e2m1ToFp32(static_cast<uint8_t>(c)), kExpect[c])) << c;
    EXPECT_EQ(static_cast<double>(q::e2m1ToFp32(static_cast<uint8_t>(c))), decodeE2m1(c)) << c;
    EXPECT_EQ(q::fp32ToE2m1Sat(kExpect[c]), c) << c;  // and back
  }
}

TEST(QuantE2m1, HalfwayPointsTieToEven) {
  // (value, code): 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4.
  const struct {
    float x;
    int code;
  } kCases[] = {{0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4}, {3.5f, 6}, {5.0f, 6}};
  for (const auto& t : kCases) {
    EXPECT_EQ(q::fp32ToE2m1Sat(t.x), t.code) << t.x;
    EXPECT_EQ(q::fp32ToE2m1Sat(-t.x), t.code | 8) << t.x;
    EXPECT_EQ(q::fp32ToE2m1Sat(nextafterf(t.x, 0.0f)), bruteE2m1(nextafterf(t.x, 0.0f))) << t.x;
    EXPECT_EQ(q::fp32ToE2m1Sat(nextafterf(t.x, INFINITY)), bruteE2m1(nextafterf(t.x, INFINITY))) << t.x;
    EXPECT_NE(q::fp32ToE2m1Sat(nextafterf(t.x, 0.0f)), q::fp32ToE2m1Sat(nextafterf(t.x, INFINITY))) << t.x;
  }
}

TEST(QuantE2m1, SaturatesSignedZeroNaN) {
  EXPECT_EQ(q::fp32ToE2m1Sat(6.0f), 0x7);
  EXPECT_EQ(q::fp32ToE2m1Sat(6.5f), 0x7);
  EXPECT_EQ(q::fp32ToE2m1Sat(7.0f), 0x7);  // the midpoint to a (non-existent) 8
  EXPECT_EQ(q::fp32ToE2m1Sat(1e30f), 0x7);
  EXPECT_EQ(q::fp32ToE2m1Sat(-1e30f), 0xF);
  EXPECT_EQ(q::fp32ToE2m1Sat(INFINITY), 0x7);
  EXPECT_EQ(q::fp32ToE2m1Sat(-INFINITY), 0xF);
  EXPECT_EQ(q::fp32ToE2m1Sat(0.0f), 0x0);
  EXPECT_EQ(q::fp32ToE2m1Sat(-0.0f), 0x8);
  EXPECT_EQ(q::fp32ToE2m1Sat(-0.1f), 0x8);
  EXPECT_EQ(q::fp32ToE2m1Sat(-FLT_TRUE_MIN), 0x8);
  EXPECT_EQ(q::fp32ToE2m1Sat(nextafterf(0.25f, 1.0f)), 0x1);
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0xFFC00000u, 0xFFFFFFFFu}) {
    EXPECT_EQ(q::fp32ToE2m1Sat(f32(nan)), 0x7) << std::hex << nan;  // positive MAX_NORM
    EXPECT_EQ(nvE2m1(f32(nan)), 0x7) << std::hex << nan;
  }
  EXPECT_EQ(nvE2m1(-INFINITY), 0xF);
  EXPECT_EQ(nvE2m1(-0.0f), 0x8);
}

TEST(QuantE2m1, MatchesBruteForceAndNvidiaOnRandomInputs) {
  const std::vector<float> in = randomInputs(4u << 20, 11);
  size_t bad = 0;
  for (float x : in) {
    const uint8_t got = q::fp32ToE2m1Sat(x);
    if (got != bruteE2m1(x) || got != nvE2m1(x)) {
      if (++bad < 10)
        ADD_FAILURE() << "x=" << x << " got=" << int(got) << " brute=" << int(bruteE2m1(x)) << " nv=" << int(nvE2m1(x));
    }
  }
  EXPECT_EQ(bad, 0u);
}

TEST(QuantE2m1, MatchesNvidiaOnEveryFloatNearTheRange) {
  size_t bad = 0;
  for (uint32_t e = 127 - 4; e < 127 + 5; ++e) {  // [2^-4, 2^5): every code, tie and saturation
    for (uint32_t m = 0; m < (1u << 23); ++m) {
      for (uint32_t s : {0u, 0x80000000u}) {
        const float x = f32(s | e << 23 | m);
        if (q::fp32ToE2m1Sat(x) != nvE2m1(x) && ++bad < 10) ADD_FAILURE() << std::hex << u32(x);
      }
    }
  }
  EXPECT_EQ(bad, 0u);
}

TEST(QuantFormats, EveryFp32BitPatternMatchesNvidia) {
  const char* env = getenv("ARFUSE_QUANT_EXHAUSTIVE");
  if (env == nullptr || strcmp(env, "1") != 0) {
    GTEST_SKIP() << "all 2^32 fp32 inputs (about 15 s): set ARFUSE_QUANT_EXHAUSTIVE=1 to run them";
  }
  uint64_t bad8 = 0, bad4 = 0;
  for (uint64_t i = 0; i <= 0xFFFFFFFFull; ++i) {
    const float x = f32(static_cast<uint32_t>(i));
    if (q::fp32ToE4m3Sat(x) != nvE4m3(x) && ++bad8 < 10) ADD_FAILURE() << "e4m3 " << std::hex << i;
    if (q::fp32ToE2m1Sat(x) != nvE2m1(x) && ++bad4 < 10) ADD_FAILURE() << "e2m1 " << std::hex << i;
  }
  EXPECT_EQ(bad8, 0u);
  EXPECT_EQ(bad4, 0u);
}

// ---------------------------------------------------------------- NVFP4 blocks

namespace {

struct Block {
  uint8_t sf;
  uint8_t q[8];
};

Block quantBlock(const float (&x)[16], float g) {
  Block b{};
  EXPECT_TRUE(q::refNvfp4Row(x, 16, g, 0, 1, q::kSfLayoutLinear, b.q, &b.sf));
  return b;
}

}  // namespace

TEST(QuantNvfp4, AllZerosBlock) {
  const float x[16] = {};
  const Block b = quantBlock(x, 268.8f);
  EXPECT_EQ(b.sf, 0);
  for (uint8_t v : b.q) EXPECT_EQ(v, 0);
  EXPECT_EQ(q::nvfp4OutputScale(0, 268.8f), 0.0f);
}

TEST(QuantNvfp4, OneBigValue) {
  float x[16] = {};
  x[5] = 100.0f;
  // g = 1: sf = e4m3(100 * (1 * (1/6))) = e4m3(16.67) = 16 (0x58; the step at 16 is 2);
  // os = 1 / (16 * (1 / 1)) = 1/16; q[5] = e2m1(6.25) = 6 (0x7), the rest 0.
  const Block b = quantBlock(x, 1.0f);
  EXPECT_EQ(b.sf, 0x58);
  EXPECT_EQ(q::e4m3ToFp32(b.sf), 16.0f);
  EXPECT_EQ(q::nvfp4OutputScale(b.sf, 1.0f), 0.0625f);
  const uint8_t kExpect[8] = {0, 0, 0x70, 0, 0, 0, 0, 0};  // element 5: high nibble of byte 2
  for (int i = 0; i < 8; ++i) EXPECT_EQ(b.q[i], kExpect[i]) << i;
}

TEST(QuantNvfp4, MixedSignsExactValues) {
  // amax 6 with g = 1: sf = e4m3(6 * fl(1/6)) = e4m3(1 + 2^-25 rounded to fp32 = 1) = 0x38, os = 1,
  // so every value is one of E2M1's own and comes back as its code.
  const float x[16] = {6, -6, 3, -3, 1.5f, -1.5f, 0.5f, -0.5f, 1, -1, 2, -2, 4, -4, 0, -0.0f};
  const Block b = quantBlock(x, 1.0f);
  EXPECT_EQ(b.sf, 0x38);
  const uint8_t kExpect[8] = {0xF7, 0xD5, 0xB3, 0x91, 0xA2, 0xC4, 0xE6, 0x80};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(b.q[i], kExpect[i]) << i;
}

TEST(QuantNvfp4, RealisticGlobalScale) {
  // Tensor amax 10 -> g = 448 * 6 / 10 = 268.8. Block amax 10: sf = e4m3(10 * (268.8 * fl(1/6))) =
  // e4m3(448.0000x) = 448 (0x7E); os = 1 / (448 * fl(1/268.8)) ~ 0.6; 10 -> 6 (0x7), -5 -> -3 (0xD:
  // -5 * 0.6 = -3.0000x), 1 -> e2m1(0.6) = 0.5 (0x1), 0.9 -> e2m1(0.54) = 0.5.
  float x[16] = {10, -5, 1, 0.9f};
  const float g = 448.0f * 6.0f / 10.0f;
  const Block b = quantBlock(x, g);
  EXPECT_EQ(b.sf, 0x7E);
  const float os = q::nvfp4OutputScale(b.sf, g);
  EXPECT_EQ(os, 1.0f / (448.0f * (1.0f / g)));
  EXPECT_NEAR(os, 0.6, 1e-6);
  EXPECT_EQ(b.q[0], 0xD7);
  EXPECT_EQ(b.q[1], 0x11);
  for (int i = 2; i < 8; ++i) EXPECT_EQ(b.q[i], 0);
}

TEST(QuantNvfp4, SaturationUnderflowAndNaN) {
  float x[16];
  for (float& v : x) v = 1.0f;
  // g so large that the block scale saturates at 448: every value lands above 6 and saturates.
  Block b = quantBlock(x, 1e6f);
  EXPECT_EQ(b.sf, 0x7E);
  for (uint8_t v : b.q) EXPECT_EQ(v, 0x77);
  // amax * g / 6 below half the smallest E4M3 subnormal: sf = 0, os = 0, the block is all zeros.
  for (float& v : x) v = 1e-4f;
  b = quantBlock(x, 1.0f);
  EXPECT_EQ(b.sf, 0);
  for (uint8_t v : b.q) EXPECT_EQ(v, 0);
  // A NaN does not enter amax; its own code is e2m1(NaN) = +6.
  for (float& v : x) v = 3.0f;
  x[3] = NAN;
  b = quantBlock(x, 2.0f);  // sf = e4m3(3 * (2 * fl(1/6))) = e4m3(1) = 0x38, os = 1 / (1 * 0.5) = 2
  EXPECT_EQ(b.sf, 0x38);
  EXPECT_EQ(b.q[0], 0x77);  // 3 * 2 = 6
  EXPECT_EQ(b.q[1], 0x77);  // element 3 (NaN) in the high nibble: 0x7
  // An infinite value: amax = inf, sf saturates, inf * os -> 6; finite values become tiny.
  x[3] = -INFINITY;
  b = quantBlock(x, 2.0f);
  EXPECT_EQ(b.sf, 0x7E);
  EXPECT_EQ(b.q[1] >> 4, 0xF);
}

// Random rows, against the definition spelled out with plain fp32 arithmetic and the brute-force
// conversions (no formats.h conversion involved), and the error bound of the dequantised values.
TEST(QuantNvfp4, RandomRowsMatchIndependentArithmetic) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int rows = 37, hidden = 7168, cols = hidden / 16;
  std::vector<float> v(static_cast<size_t>(rows) * hidden);
  float tensorAmax = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = nd(rng) * ((i / 16) % 7 == 0 ? 40.0f : 1.0f);  // some blocks much larger than others
    tensorAmax = fmaxf(tensorAmax, fabsf(v[i]));
  }
  const float g = 448.0f * 6.0f / tensorAmax;
  std::vector<uint8_t> qv(v.size() / 2), sf(q::sfBytes(q::kSfLayoutSwizzled128x4, rows, cols), 0xAA);
  ASSERT_TRUE(q::refNvfp4Tensor(v.data(), rows, hidden, g, q::kSfLayoutSwizzled128x4, qv.data(), sf.data()));
  const volatile float sixth = 1.0f / 6.0f;  // volatile: the arithmetic below stays in plain fp32 steps
  double worst = 0;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const float* x = &v[static_cast<size_t>(r) * hidden + c * 16];
      float amax = 0;
      for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(x[i]));
      const float gs = g * sixth;
      const uint8_t sfe = bruteE4m3(amax * gs);
      ASSERT_EQ(sf[q::sfOffset(q::kSfLayoutSwizzled128x4, r, c, rows, cols)], sfe) << r << "," << c;
      const float sfv = static_cast<float>(decodeE4m3(sfe));
      const float invg = 1.0f / g;
      const float denom = sfv * invg;
      const float os = sfe == 0 ? 0.0f : 1.0f / denom;
      for (int i = 0; i < 16; ++i) {
        const int k = c * 16 + i;
        const uint8_t byte = qv[static_cast<size_t>(r) * hidden / 2 + k / 2];
        const uint8_t code = (k % 2 == 0) ? (byte & 0xF) : (byte >> 4);
        const float scaled = x[i] * os;
        ASSERT_EQ(code, bruteE2m1(scaled)) << r << "," << k;
        // Dequantised error: half an E2M1 step (at most 1, between 4 and 6) in scaled units, plus
        // the block-scale rounding; scaled values stay <= 6 * (1 + 2^-3) by the E4M3 rounding of sf.
        const double deq = q::refNvfp4Dequant(&qv[static_cast<size_t>(r) * hidden / 2], sf.data(), k, r, rows, hidden,
                                              q::kSfLayoutSwizzled128x4, g);
        EXPECT_NEAR(deq, x[i], 1.0001 * sfv / g + 1e-30) << r << "," << k;
        worst = fmax(worst, fabs(deq - x[i]) / amax);
      }
    }
  }
  EXPECT_LT(worst, 0.25);  // relative to the block amax: at most one E2M1 step / 6 after rounding sf
}

TEST(QuantNvfp4, RejectsHiddenNotMultipleOf16) {
  float x[24] = {};
  uint8_t qv[12], sf[2];
  EXPECT_FALSE(q::refNvfp4Row(x, 24, 1.0f, 0, 1, q::kSfLayoutLinear, qv, sf));
  EXPECT_FALSE(q::refNvfp4Row(x, 16, 1.0f, 1, 1, q::kSfLayoutLinear, qv, sf));  // row out of range
}

// ---------------------------------------------------------------- scale-factor layouts

TEST(QuantSfLayout, LinearOffsetsAndBytes) {
  EXPECT_EQ(q::sfBytes(q::kSfLayoutLinear, 3, 5), 15u);
  EXPECT_EQ(q::sfOffset(q::kSfLayoutLinear, 0, 0, 3, 5), 0u);
  EXPECT_EQ(q::sfOffset(q::kSfLayoutLinear, 0, 4, 3, 5), 4u);
  EXPECT_EQ(q::sfOffset(q::kSfLayoutLinear, 2, 3, 3, 5), 13u);
  EXPECT_EQ(q::sfBytes(q::kSfLayoutLinear, 256, 448), 256u * 448);
}

TEST(QuantSfLayout, SwizzledOffsetsByHand) {
  const int S = q::kSfLayoutSwizzled128x4;
  // 2 rows x 3 scale columns (hidden 48): one 128x4 tile of 512 bytes.
  EXPECT_EQ(q::sfBytes(S, 2, 3), 512u);
  const struct {
    int row, col, rows, cols;
    size_t off;
  } kTable[] = {
      {0, 0, 2, 3, 0},        {0, 1, 2, 3, 1},        {0, 2, 2, 3, 2},       {1, 0, 2, 3, 16},
      {1, 2, 2, 3, 18},  // 130 rows x 5 cols: 2 x 2 tiles
      {0, 4, 130, 5, 512},    {31, 0, 130, 5, 496},   {32, 0, 130, 5, 4},    {33, 1, 130, 5, 21},
      {64, 2, 130, 5, 10},    {96, 3, 130, 5, 15},    {127, 3, 130, 5, 511}, {128, 0, 130, 5, 1024},
      {129, 4, 130, 5, 1552}, {129, 7, 130, 5, 1555},  // col 7: padding column of the second k tile
      {255, 7, 130, 5, 2047},                          // last padding byte
  };
  for (const auto& t : kTable) {
    EXPECT_EQ(q::sfOffset(S, t.row, t.col, t.rows, t.cols), t.off) << t.row << "," << t.col;
  }
  EXPECT_EQ(q::sfBytes(S, 130, 5), 2048u);
  EXPECT_EQ(q::sfBytes(S, 128, 4), 512u);
  EXPECT_EQ(q::sfBytes(S, 1, 448), 128u * 448);  // hidden 7168, one token: 57344 bytes
  EXPECT_EQ(q::sfBytes(S, 0, 448), 0u);
}

// The swizzled layout is a permutation of the padded [rows][cols] grid onto [0, sfBytes): every
// padded (row, col) has its own byte, checked against an independent 5-D index construction.
TEST(QuantSfLayout, SwizzledIsAPermutationOfThePaddedGrid) {
  const int S = q::kSfLayoutSwizzled128x4;
  for (int rows : {1, 5, 128, 129, 300}) {
    for (int cols : {1, 3, 4, 7, 448}) {
      const size_t prows = (rows + 127) / 128 * 128, pcols = (cols + 3) / 4 * 4;
      ASSERT_EQ(q::sfBytes(S, rows, cols), prows * pcols);
      std::vector<int> seen(prows * pcols, 0);
      for (size_t r = 0; r < prows; ++r) {
        for (size_t c = 0; c < pcols; ++c) {
          const size_t off = q::sfOffset(S, static_cast<int>(r), static_cast<int>(c), rows, cols);
          ASSERT_LT(off, seen.size());
          ++seen[off];
          // dims [mTiles][kTiles][32][4][4], index [r/128][c/4][r%32][(r/32)%4][c%4]
          const size_t idx[5] = {r / 128, c / 4, r % 32, (r / 32) % 4, c % 4};
          const size_t dim[5] = {prows / 128, pcols / 4, 32, 4, 4};
          size_t flat = 0;
          for (int d = 0; d < 5; ++d) flat = flat * dim[d] + idx[d];
          ASSERT_EQ(off, flat);
        }
      }
      for (int s : seen) ASSERT_EQ(s, 1);
    }
  }
}

TEST(QuantSfLayout, PaddingIsZeroedAndEveryByteWritten) {
  const int rows = 130, hidden = 80, cols = 5;  // 2 x 2 tiles, 126 padding rows, 3 padding cols
  std::vector<float> v(rows * hidden, 1.0f);
  for (int layout : {q::kSfLayoutLinear, q::kSfLayoutSwizzled128x4}) {
    std::vector<uint8_t> qv(rows * hidden / 2, 0xAA), sf(q::sfBytes(layout, rows, cols), 0xAA);
    ASSERT_TRUE(q::refNvfp4Tensor(v.data(), rows, hidden, 1.0f, layout, qv.data(), sf.data()));
    // All-ones blocks, g = 1: sf = e4m3(1 * fl(1/6)) = 0x23 (0.171875, the nearer of 0.15625 / 0.171875), os =
    // 1/0.171875 = 5.818..., e2m1(5.818) = 6 (0x7).
    size_t real = 0, zero = 0;
    for (uint8_t b : sf) {
      ASSERT_NE(b, 0xAA);
      real += b == 0x23;
      zero += b == 0;
    }
    EXPECT_EQ(real, static_cast<size_t>(rows * cols));
    EXPECT_EQ(zero, sf.size() - rows * cols);
    if (layout == q::kSfLayoutSwizzled128x4) EXPECT_EQ(zero, 256u * 8 - 650);
    for (uint8_t b : qv) ASSERT_EQ(b, 0x77);
  }
  EXPECT_EQ(q::e4m3ToFp32(0x23), 0.171875f);
}

// ---------------------------------------------------------------- FP8 rows

TEST(QuantFp8, StaticRow) {
  // s = 0.5 -> multiply by 2: 100 -> 200 (tie between 192 and 208: even 192, 0x74); 300 -> 600 ->
  // 448; -0 -> 0x80; NaN -> 0x7F; 1e-3 -> 2e-3 = 1.024 * 2^-9 -> subnormal 0x01.
  const float v[6] = {100.0f, 300.0f, -0.0f, NAN, 1e-3f, -3.0f};
  uint8_t qv[6];
  q::refFp8StaticRow(v, 6, 0.5f, qv);
  const uint8_t kExpect[6] = {0x74, 0x7E, 0x80, 0x7F, 0x01, 0xCC};  // -6 = -1.5 * 4: 0x80 | 9 << 3 | 4
  for (int i = 0; i < 6; ++i) EXPECT_EQ(qv[i], kExpect[i]) << i;
  // 1 / 3 is rounded once; x * fl(1/3) can differ from x / 3: the definition is the former.
  const float s = 3.0f, inv = 1.0f / s;
  for (float x : {1.0f, 5.0f, 100.0f, 447.0f})
    EXPECT_EQ(q::fp8StaticQuant(x, q::fp8StaticInvScale(s)), bruteE4m3(x * inv));
}

TEST(QuantFp8, PerTokenRows) {
  uint8_t qv[4];
  {  // all zeros: the scale floor, q = 0
    const float v[4] = {0, -0.0f, 0, 0};
    EXPECT_EQ(q::refFp8PerTokenRow(v, 4, qv), 1.0f / 229376.0f);
    EXPECT_EQ(q::kFp8MinTokenScale, 1.0f / 229376.0f);
    const uint8_t kExpect[4] = {0, 0x80, 0, 0};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(qv[i], kExpect[i]);
  }
  {  // amax 448: s = 1, q = e4m3(x)
    const float v[4] = {448.0f, -1.0f, 0.3f, -447.0f};
    EXPECT_EQ(q::refFp8PerTokenRow(v, 4, qv), 1.0f);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(qv[i], bruteE4m3(v[i]));
    EXPECT_EQ(qv[0], 0x7E);
  }
  {  // amax 896: s = 2; -3 -> -1.5 (0xBC); the amax element maps to 448 exactly
    const float v[4] = {1.0f, -3.0f, 896.0f, -896.0f};
    EXPECT_EQ(q::refFp8PerTokenRow(v, 4, qv), 2.0f);
    const uint8_t kExpect[4] = {0x30, 0xBC, 0x7E, 0xFE};  // 0.5 = 2^-1: e 6 -> 0x30
    for (int i = 0; i < 4; ++i) EXPECT_EQ(qv[i], kExpect[i]) << i;
  }
  {  // amax 1: s = fl(1/448); each element x / s, a true division, then e4m3
    const float v[4] = {1.0f, -0.5f, 0.01f, NAN};
    const float s = q::refFp8PerTokenRow(v, 4, qv);
    EXPECT_EQ(s, 1.0f / 448.0f);
    EXPECT_EQ(qv[0], 0x7E);
    EXPECT_EQ(qv[1], bruteE4m3(-0.5f / s));
    EXPECT_EQ(qv[2], bruteE4m3(0.01f / s));
    EXPECT_EQ(qv[3], 0x7F);  // NaN does not enter amax and stays NaN
  }
}

TEST(QuantFp8, AbsMaxIgnoresNaNAndOrder) {
  EXPECT_EQ(q::absMaxAccum(0.0f, -3.0f), 3.0f);
  EXPECT_EQ(q::absMaxAccum(3.0f, NAN), 3.0f);
  EXPECT_EQ(q::absMaxAccum(0.0f, -INFINITY), INFINITY);
  EXPECT_EQ(u32(q::absMaxAccum(0.0f, -0.0f)), 0u);
}
