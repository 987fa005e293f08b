// `arfuse bench --epilogue` without a GPU: the variants' forms, the bytes each call moves (what
// the copy floor copies), and the check every timed epilogue row gets (tools/harness/epilogue.h),
// on outputs made here the way the kernels must make them, then broken one byte at a time.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "harness/epilogue.h"
#include "harness/numeric.h"
#include "quant/formats.h"

namespace arfuse {
namespace harness {
namespace {

TEST(BenchEpilogue, NamesAndForms) {
  for (int k = 0; k < kNumEpilogues; ++k) {
    int back = -1;
    ASSERT_TRUE(parseEpilogue(epilogueName(k), &back)) << k;
    EXPECT_EQ(back, k);
  }
  int k = 0;
  EXPECT_FALSE(parseEpilogue("FP8", &k));
  EXPECT_EQ(epilogueNameList(), "none, plain, first, plusone, fp8, fp8-token, nvfp4 or nvfp4-swizzled");

  EXPECT_FALSE(epilogueForm(kEpilogueNone).viaEpilogue);
  const EpilogueForm plain = epilogueForm(kEpiloguePlain);
  EXPECT_TRUE(plain.viaEpilogue && plain.residualIn && plain.residualOut && plain.normOut && !plain.plusOne);
  EXPECT_EQ(plain.quant, arfuseQuantNone);
  EXPECT_FALSE(epilogueForm(kEpilogueFirst).residualIn);
  EXPECT_TRUE(epilogueForm(kEpiloguePlusOne).plusOne);
  // The quantised variants: residual_out + quant_out (+ scales), no norm_out.
  for (int q : {kEpilogueFp8, kEpilogueFp8Token, kEpilogueNvfp4, kEpilogueNvfp4Swizzled}) {
    const EpilogueForm f = epilogueForm(q);
    EXPECT_TRUE(f.viaEpilogue && f.residualIn && f.residualOut) << epilogueName(q);
    EXPECT_FALSE(f.normOut) << epilogueName(q);
  }
  EXPECT_EQ(epilogueForm(kEpilogueFp8).quant, arfuseQuantFp8Static);
  EXPECT_EQ(epilogueForm(kEpilogueFp8Token).quant, arfuseQuantFp8PerToken);
  EXPECT_EQ(epilogueForm(kEpilogueNvfp4).layout, arfuseScaleLinear);
  EXPECT_EQ(epilogueForm(kEpilogueNvfp4Swizzled).quant, arfuseQuantNvfp4);
  EXPECT_EQ(epilogueForm(kEpilogueNvfp4Swizzled).layout, arfuseScaleSwizzled128x4);
}

TEST(BenchEpilogue, BytesMovedAreWhatTheCallReadsAndWrites) {
  const int t = 3, h = 7168;
  const size_t n = size_t(t) * h * 2;  // bf16
  const size_t w = size_t(h) * 2;
  // none / plain / plusone: x, residual_in, weight, residual_out, norm_out (today's 4n + weight).
  for (int k : {kEpilogueNone, kEpiloguePlain, kEpiloguePlusOne})
    EXPECT_EQ(epilogueBytes(k, t, h, 2).total(), 4 * n + w);
  EXPECT_EQ(epilogueBytes(kEpilogueFirst, t, h, 2).total(), 3 * n + w);
  // FP8 static: 1 byte per element and the scale read.
  EXPECT_EQ(epilogueBytes(kEpilogueFp8, t, h, 2).total(), 3 * n + w + size_t(t) * h + 4);
  // FP8 per token: a float per row written, no scale read.
  EXPECT_EQ(epilogueBytes(kEpilogueFp8Token, t, h, 2).total(), 3 * n + w + size_t(t) * h + 4 * t);
  // NVFP4: half a byte per element, one E4M3 per 16 elements, the global scale read.
  EXPECT_EQ(epilogueBytes(kEpilogueNvfp4, t, h, 2).total(), 3 * n + w + size_t(t) * h / 2 + size_t(t) * h / 16 + 4);
  // Swizzled: the padded 128 x 4 tiles are written too (3 rows -> 128; 448 columns already a multiple of 4).
  EXPECT_EQ(epilogueBytes(kEpilogueNvfp4Swizzled, t, h, 2).scaleOut, size_t(128) * 448);
  EXPECT_EQ(epilogueBytes(kEpilogueNvfp4Swizzled, t, h, 2).total(), 3 * n + w + size_t(t) * h / 2 + 128 * 448 + 4);
  // fp32 elements.
  EXPECT_EQ(epilogueBytes(kEpilogueFp8, 1, 4096, 4).total(), 3 * 4096 * 4 + 4096 * 4 + 4096 + 4);
}

// One call's outputs, made on the CPU as the kernels must make them.
struct Made {
  std::vector<std::vector<uint8_t>> x;
  std::vector<uint8_t> residualIn, weight;
  EpilogueCase c;
  std::vector<EpilogueOutputs> out;
};

Made make(int kind, int ranks, int tokens, int hidden, arfuseDataType_t dt, bool withNorm) {
  Made m;
  const size_t count = size_t(tokens) * hidden, es = numeric::elemSize(dt);
  uint64_t s = 12345;
  auto next = [&] {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return float((s >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f;
  };
  m.x.assign(ranks, std::vector<uint8_t>(count * es));
  for (auto& x : m.x)
    for (size_t i = 0; i < count; ++i) numeric::store(x.data(), i, next(), dt);
  m.residualIn.resize(count * es);
  for (size_t i = 0; i < count; ++i) numeric::store(m.residualIn.data(), i, next(), dt);
  m.weight.resize(hidden * es);
  for (int i = 0; i < hidden; ++i) numeric::store(m.weight.data(), i, 1.f + 0.5f * next(), dt);
  m.c.dtype = dt;
  m.c.tokens = tokens;
  m.c.hidden = hidden;
  m.c.form = epilogueForm(kind);
  m.c.form.normOut = m.c.form.normOut || withNorm;
  m.c.scaleIn = epilogueScaleIn(m.c.form.quant);
  for (auto& x : m.x) m.c.x.push_back(x.data());
  m.c.residualIn = m.c.form.residualIn ? m.residualIn.data() : nullptr;
  m.c.weight = m.weight.data();

  EpilogueOutputs o;
  o.residual.resize(count * es);
  std::vector<float> r(count), nv(count);
  for (size_t i = 0; i < count; ++i) {
    float acc = 0;
    for (auto& x : m.x) acc += numeric::load(x.data(), i, dt);
    if (m.c.form.residualIn) acc += numeric::load(m.residualIn.data(), i, dt);
    numeric::store(o.residual.data(), i, acc, dt);
    r[i] = numeric::load(o.residual.data(), i, dt);
  }
  std::vector<uint8_t> norm(count * es);
  for (int t = 0; t < tokens; ++t) {
    double sq = 0;
    for (int h = 0; h < hidden; ++h) sq += double(r[size_t(t) * hidden + h]) * r[size_t(t) * hidden + h];
    const double inv = 1.0 / std::sqrt(sq / hidden + m.c.eps);
    for (int h = 0; h < hidden; ++h) {
      const size_t j = size_t(t) * hidden + h;
      const double w = numeric::load(m.weight.data(), h, dt) + (m.c.form.plusOne ? 1.0 : 0.0);
      numeric::store(norm.data(), j, float(r[j] * inv * w), dt);
      nv[j] = numeric::load(norm.data(), j, dt);
    }
  }
  if (m.c.form.normOut) o.norm = norm;
  if (m.c.form.quant != arfuseQuantNone)
    EXPECT_TRUE(
        referenceQuant(m.c.form.quant, m.c.form.layout, m.c.scaleIn, nv.data(), tokens, hidden, &o.quant, &o.scale));
  m.out.assign(ranks, o);
  return m;
}

TEST(BenchEpilogue, CheckPassesCorrectOutputsOfEveryVariant) {
  for (arfuseDataType_t dt : {arfuseBfloat16, arfuseFloat16, arfuseFloat32})
    for (int k = kEpiloguePlain; k < kNumEpilogues; ++k) {
      Made m = make(k, 3, 5, 2064, dt, true);  // 2064 / 16 = 129 scale columns: swizzled pads to 132
      const EpilogueCheck c = checkEpilogue(m.c, m.out);
      EXPECT_TRUE(c.ok) << epilogueName(k) << " " << arfuseDataTypeName(dt) << ": " << c.error;
      EXPECT_TRUE(c.identical);
      EXPECT_EQ(c.wrongQuant + c.wrongScale, 0u);
    }
}

TEST(BenchEpilogue, CheckFindsEveryKindOfWrongByte) {
  // A quantised value one code off.
  Made m = make(kEpilogueNvfp4Swizzled, 2, 5, 2064, arfuseBfloat16, true);
  for (auto& o : m.out) o.quant[17] ^= 0x01;
  EpilogueCheck c = checkEpilogue(m.c, m.out);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.wrongQuant, 1u);
  EXPECT_NE(c.error.find("quantised bytes differing from the CPU reference: 1 of"), std::string::npos) << c.error;
  // Swizzled padding not zeroed (the bench poisons it with 0x5A).
  m = make(kEpilogueNvfp4Swizzled, 2, 5, 2064, arfuseBfloat16, true);
  for (auto& o : m.out) o.scale.back() = 0x5A;
  c = checkEpilogue(m.c, m.out);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.wrongScale, 1u);
  // A per-token scale.
  m = make(kEpilogueFp8Token, 2, 5, 256, arfuseFloat16, true);
  for (auto& o : m.out) o.scale[4] ^= 0x01;
  EXPECT_EQ(checkEpilogue(m.c, m.out).wrongScale, 1u);
  // Ranks that disagree.
  m = make(kEpilogueFp8, 3, 2, 256, arfuseBfloat16, true);
  m.out[2].quant[0] ^= 0x80;
  c = checkEpilogue(m.c, m.out);
  EXPECT_FALSE(c.ok);
  EXPECT_FALSE(c.identical);
  EXPECT_NE(c.error.find("quant_out differs on rank 2"), std::string::npos) << c.error;
  // A residual one ulp off the fp32 rank-order sum.
  m = make(kEpilogueFirst, 2, 2, 256, arfuseBfloat16, true);
  for (auto& o : m.out) o.residual[6] ^= 0x01;
  c = checkEpilogue(m.c, m.out);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.errResidual, 1.0);
  // An unwritten (NaN-poisoned) norm element.
  m = make(kEpiloguePlusOne, 2, 2, 256, arfuseBfloat16, true);
  for (auto& o : m.out) o.norm[0] = o.norm[1] = 0xFF;
  c = checkEpilogue(m.c, m.out);
  EXPECT_FALSE(c.ok);
  EXPECT_TRUE(std::isinf(c.errNorm));
  // The (1 + w) variant checked as plain w: the norm is wrong.
  m = make(kEpiloguePlusOne, 2, 2, 256, arfuseBfloat16, true);
  m.c.form.plusOne = false;
  EXPECT_FALSE(checkEpilogue(m.c, m.out).ok);
}

TEST(BenchEpilogue, QuantisedRunWithoutNormMustMatchTheCheckedOne) {
  Made with = make(kEpilogueNvfp4, 2, 3, 512, arfuseBfloat16, true);
  Made without = make(kEpilogueNvfp4, 2, 3, 512, arfuseBfloat16, false);
  EXPECT_FALSE(without.c.form.normOut);
  // Without norm_out only the residual and the agreement across ranks can be checked...
  EXPECT_TRUE(checkEpilogue(without.c, without.out).ok);
  // ...so the bench compares its bytes with the run that wrote norm_out (checked against the reference).
  EXPECT_EQ(sameQuantisedOutputs(without.out, with.out), "");
  without.out[1].quant[3] ^= 0x10;
  EXPECT_EQ(sameQuantisedOutputs(without.out, with.out), "quant_out differs with norm_out written (rank 1)");
}

}  // namespace
}  // namespace harness
}  // namespace arfuse
