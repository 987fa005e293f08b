#include "api/validate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "policy/config.h"

namespace arfuse {
namespace {

alignas(16) char pool[4096];

TEST(Validate, NullAndMisalignedNameTheArgument) {
  EXPECT_NE(checkBuffers({{"x", nullptr, 64}}, {}).message().find("x is NULL"), std::string::npos);
  EXPECT_NE(checkBuffers({{"weight", pool + 8, 64}}, {}).message().find("weight="), std::string::npos);
  EXPECT_NE(checkBuffers({{"weight", pool + 8, 64}}, {}).message().find("16-byte aligned"), std::string::npos);
  EXPECT_EQ(checkBuffers({{"x", pool, 64}, {"y", pool + 64, 64}}, {}).message(), "");
}

TEST(Validate, OnlyExactAllowedAliases) {
  const std::vector<AliasRule> rules = {{"residual_out", "residual_in"}, {"norm_out", "x"}};
  EXPECT_EQ(checkBuffers({{"x", pool, 256}, {"norm_out", pool, 256}}, rules).message(), "");
  EXPECT_EQ(checkBuffers({{"residual_in", pool, 256}, {"residual_out", pool, 256}}, rules).message(), "");
  // Partial overlap of an allowed pair is an error.
  std::string m = checkBuffers({{"x", pool, 256}, {"norm_out", pool + 128, 256}}, rules).message();
  EXPECT_NE(m.find("overlap"), std::string::npos);
  // Exact alias of a pair that is not allowed is an error naming both.
  m = checkBuffers({{"x", pool, 256}, {"residual_out", pool, 256}}, rules).message();
  EXPECT_NE(m.find("x="), std::string::npos);
  EXPECT_NE(m.find("residual_out="), std::string::npos);
  EXPECT_NE(m.find("residual_out == residual_in"), std::string::npos) << m;
}

TEST(Validate, Eps) {
  EXPECT_EQ(checkEps(1e-6f).message(), "");
  EXPECT_NE(checkEps(0.f).message(), "");
  EXPECT_NE(checkEps(-1e-5f).message(), "");
  EXPECT_NE(checkEps(NAN).message().find("eps=nan"), std::string::npos);
  EXPECT_NE(checkEps(INFINITY).message(), "");
}

TEST(Validate, EpilogueOptionsAndTheirErrors) {
  alignas(16) static char pool[1 << 16];
  float scale = 1.f;
  std::vector<BufferArg> bufs;
  std::vector<AliasRule> aliases;
  EpiArgs out;
  EXPECT_NE(checkEpilogue(nullptr, 4, 64, 2, &out, &bufs, &aliases).message().find("epilogue is NULL"),
            std::string::npos);
  arfuseEpilogue_t e = ARFUSE_EPILOGUE_INITIALIZER;
  EXPECT_NE(checkEpilogue(&e, 4, 64, 2, &out, &bufs, &aliases).message().find("no output requested"),
            std::string::npos);
  arfuseEpilogue_t bad = e;
  bad.magic = 0;
  EXPECT_NE(checkEpilogue(&bad, 4, 64, 2, &out, &bufs, &aliases).message().find("ARFUSE_EPILOGUE_INITIALIZER"),
            std::string::npos);
  bad = e;
  bad.quant = 9;
  EXPECT_NE(checkEpilogue(&bad, 4, 64, 2, &out, &bufs, &aliases).message().find("epilogue.quant=9"), std::string::npos);
  // First layer, norm only: no residual buffers, the options say so.
  e.normOut = pool;
  bufs.clear();
  ASSERT_EQ(checkEpilogue(&e, 4, 64, 2, &out, &bufs, &aliases).message(), "");
  EXPECT_EQ(out.enabled, 1);
  EXPECT_EQ(out.firstLayer, 1);
  EXPECT_EQ(out.writeResidual, 0);
  EXPECT_EQ(out.writeNorm, 1);
  EXPECT_EQ(out.tokens, 4);
  ASSERT_EQ(bufs.size(), 1u);
  EXPECT_EQ(bufs[0].bytes, 4u * 64 * 2);
  // FP8 static needs its scale; per token its scale tensor; both a 16-byte aligned quantOut.
  e.quant = arfuseQuantFp8Static;
  EXPECT_NE(checkEpilogue(&e, 4, 64, 2, &out, &bufs, &aliases).message().find("epilogue.scaleIn is NULL"),
            std::string::npos);
  e.scaleIn = &scale;
  e.quantOut = pool + 4096;
  bufs.clear();
  ASSERT_EQ(checkEpilogue(&e, 4, 64, 2, &out, &bufs, &aliases).message(), "");
  EXPECT_EQ(bufs.back().bytes, 4u * 64);  // one byte per element
  e.quant = arfuseQuantFp8PerToken;
  EXPECT_NE(checkEpilogue(&e, 4, 64, 2, &out, &bufs, &aliases).message().find("epilogue.scaleOut is NULL"),
            std::string::npos);
  e.scaleOut = pool + 8192 + 2;  // misaligned for a float
  EXPECT_NE(checkEpilogue(&e, 4, 64, 2, &out, &bufs, &aliases).message().find("not 4-byte aligned"), std::string::npos);
  // NVFP4: hidden % 16, a layout, half a byte per element.
  e.quant = arfuseQuantNvfp4;
  e.scaleOut = pool + 8192;
  EXPECT_NE(checkEpilogue(&e, 4, 72, 2, &out, &bufs, &aliases).message().find("hidden=72"), std::string::npos);
  e.scaleLayout = 5;
  EXPECT_NE(checkEpilogue(&e, 4, 64, 2, &out, &bufs, &aliases).message().find("epilogue.scaleLayout=5"),
            std::string::npos);
  e.scaleLayout = arfuseScaleSwizzled128x4;
  bufs.clear();
  ASSERT_EQ(checkEpilogue(&e, 4, 64, 2, &out, &bufs, &aliases).message(), "");
  EXPECT_EQ(bufs.back().bytes, 4u * 64 / 2);
  EXPECT_EQ(out.scaleLayout, 1);
  // Scale tensor sizes: linear rows x cols; swizzled padded to 128 rows and 4 columns.
  EXPECT_EQ(nvfp4ScaleBytes(arfuseScaleLinear, 37, 4144), 37u * 259);
  EXPECT_EQ(nvfp4ScaleBytes(arfuseScaleSwizzled128x4, 37, 4144), 128u * 260);
}

TEST(Validate, ScalePointersGetTheOverlapChecksOfEveryBuffer) {
  alignas(16) static char pool[1 << 16];
  std::vector<AliasRule> aliases;
  EpiArgs out;
  arfuseEpilogue_t e = ARFUSE_EPILOGUE_INITIALIZER;
  e.normOut = pool;  // [4, 64] bf16 = 512 bytes
  e.quant = arfuseQuantFp8PerToken;
  e.quantOut = pool + 4096;
  // Per-token scales inside normOut: the kernel would write scales over the normalised output.
  e.scaleOut = pool + 16;
  std::vector<BufferArg> bufs = {{"x", pool + 8192, 512}, {"weight", pool + 12288, 128}};
  ASSERT_EQ(checkEpilogue(&e, 4, 64, 2, &out, &bufs, &aliases).message(), "");
  std::string m = checkBuffers(bufs, aliases).message();
  EXPECT_NE(m.find("epilogue.normOut="), std::string::npos) << m;
  EXPECT_NE(m.find("epilogue.scaleOut="), std::string::npos) << m;
  EXPECT_NE(m.find("overlap"), std::string::npos) << m;
  // Apart, with their own sizes (4 bytes per token) and alignment (4), they pass, and they are in the
  // list the pointer-kind check walks.
  e.scaleOut = pool + 16384 + 4;
  bufs = {{"x", pool + 8192, 512}, {"weight", pool + 12288, 128}};
  ASSERT_EQ(checkEpilogue(&e, 4, 64, 2, &out, &bufs, &aliases).message(), "");
  EXPECT_EQ(checkBuffers(bufs, aliases).message(), "");
  bool listed = false;
  for (const BufferArg& b : bufs) listed |= std::string(b.name) == "epilogue.scaleOut" && b.bytes == 16 && b.align == 4;
  EXPECT_TRUE(listed);
  // FP8 static: the scale read from inside x is caught too.
  e.quant = arfuseQuantFp8Static;
  e.scaleIn = reinterpret_cast<const float*>(pool + 8192 + 64);
  bufs = {{"x", pool + 8192, 512}, {"weight", pool + 12288, 128}};
  ASSERT_EQ(checkEpilogue(&e, 4, 64, 2, &out, &bufs, &aliases).message(), "");
  m = checkBuffers(bufs, aliases).message();
  EXPECT_NE(m.find("epilogue.scaleIn="), std::string::npos) << m;
  // NVFP4: block scales written over the quantised output.
  e.quant = arfuseQuantNvfp4;
  e.scaleIn = reinterpret_cast<const float*>(pool + 20480);
  e.scaleLayout = arfuseScaleLinear;
  e.scaleOut = pool + 4096 + 8;
  bufs = {{"x", pool + 8192, 512}, {"weight", pool + 12288, 128}};
  ASSERT_EQ(checkEpilogue(&e, 4, 64, 2, &out, &bufs, &aliases).message(), "");
  m = checkBuffers(bufs, aliases).message();
  EXPECT_NE(m.find("epilogue.quantOut="), std::string::npos) << m;
  EXPECT_NE(m.find("epilogue.scaleOut="), std::string::npos) << m;
}

TEST(Validate, AddressWrapIsCaughtBeforeTheOverlapTest) {
  alignas(16) static char pool[256];
  // A pointer near the top of the address space: xa + bytes wrapped to a small number and the overlap
  // test then said "no overlap" with anything.
  const void* top = reinterpret_cast<const void*>((UINTPTR_MAX - 4095) & ~uintptr_t(15));
  const std::string m = checkBuffers({{"x", top, 8192}, {"norm_out", pool, 64}}, {}).message();
  EXPECT_NE(m.find("x="), std::string::npos) << m;
  EXPECT_NE(m.find("with 8192 bytes runs past the end of the address space"), std::string::npos) << m;
  EXPECT_EQ(checkBuffers({{"x", top, 4080}}, {}).message(), "");  // ending below 2^64 is representable
}

TEST(Validate, EnumArgumentsAreConvertedAtTheBoundary) {
  int v = 99;
  arfuseDataType_t d;
  std::memcpy(&d, &v, sizeof d);  // what a C caller can pass
  EXPECT_EQ(rawEnum(d), 99);
  EXPECT_EQ(checkDtypeArg(rawEnum(d)).message(),
            "dtype=99: unknown; use arfuseBfloat16, arfuseFloat16 or arfuseFloat32");
  EXPECT_EQ(checkDtypeArg(-1).message(), "dtype=-1: unknown; use arfuseBfloat16, arfuseFloat16 or arfuseFloat32");
  EXPECT_EQ(checkDtypeArg(arfuseFloat32).message(), "");
  EXPECT_EQ(checkOpArg(2).message(), "op=2: unknown; use arfuseOpAllReduce or arfuseOpAllReduceAddRmsNorm");
  EXPECT_EQ(checkOpArg(arfuseOpAllReduceAddRmsNorm).message(), "");
}

TEST(Validate, RankArguments) {
  EXPECT_EQ(checkRankArgs(16, 15).message(), "");
  EXPECT_EQ(checkRankArgs(1, 0).message(), "");
  EXPECT_EQ(checkRankArgs(17, 0).message(),
            "nranks=17: must be 1..16 (ARFUSE_MAX_RANKS); larger tensor-parallel groups are not "
            "supported");
  EXPECT_NE(checkRankArgs(0, 0).message().find("nranks=0"), std::string::npos);
  EXPECT_EQ(checkRankArgs(4, 4).message(),
            "rank=4: must be 0..3 for nranks=4 (each process passes its own, distinct rank)");
  EXPECT_NE(checkRankArgs(4, -1).message().find("rank=-1"), std::string::npos);
}

}  // namespace
}  // namespace arfuse
