// The C ABI's argument checks, through the real shared library. These checks run before any
// device is touched, so they behave the same with or without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "arfuse/arfuse.h"

namespace {

alignas(16) char hostBuf[1 << 16];

bool hasGpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

std::string last() { return arfuseGetLastError(); }

// The abstract AF_UNIX name a unique id names ("@arfuse-" + 16 bytes at offset 12 in hex), and whether
// it is bound (/proc/net/unix).
std::string idSocketName(const arfuseUniqueId& id) {
  static const char* kDigits = "0123456789abcdef";
  std::string s = "@arfuse-";
  for (int i = 12; i < 28; ++i) {
    const unsigned char b = static_cast<unsigned char>(id.internal[i]);
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}
bool bound(const std::string& name) {
  std::ifstream f("/proc/net/unix");
  std::string line;
  while (std::getline(f, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}

int countingGather(void* ctx, const void*, void*, size_t) {
  ++*static_cast<int*>(ctx);
  return 1;
}

TEST(Api, InitRankChecksNranksAndRankBeforeAnything) {
  arfuseComm_t c = nullptr;
  arfuseUniqueId id;
  ASSERT_EQ(arfuseGetUniqueId(&id), arfuseSuccess) << last();
  const std::string name = idSocketName(id);
  ASSERT_TRUE(bound(name)) << name;
  // Before issue 16 this rank 0 waited 30 s for 16 peers, with arrays of 16 indexed up to 16.
  EXPECT_EQ(arfuseCommInitRank(&c, 17, id, 0, 0, nullptr), arfuseInvalidArgument);
  EXPECT_NE(last().find("arfuseCommInitRank: nranks=17: must be 1..16 (ARFUSE_MAX_RANKS)"), std::string::npos)
      << last();
  EXPECT_FALSE(bound(name)) << "rank 0 gave up: its listener must not stay behind";
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(arfuseCommInitRank(&c, 4, id, 4, 0, nullptr), arfuseInvalidArgument);
  EXPECT_NE(last().find("rank=4: must be 0..3 for nranks=4"), std::string::npos) << last();
  EXPECT_EQ(arfuseCommInitRank(&c, 4, id, -1, 0, nullptr), arfuseInvalidArgument);
  // The framework path: its all-gather is never called with a bad rank.
  int calls = 0;
  EXPECT_EQ(arfuseCommInitRankWithAllGather(&c, 17, 0, 0, nullptr, countingGather, &calls), arfuseInvalidArgument);
  EXPECT_NE(last().find("arfuseCommInitRankWithAllGather: nranks=17"), std::string::npos) << last();
  EXPECT_EQ(arfuseCommInitRankWithAllGather(&c, 2, 2, 0, nullptr, countingGather, &calls), arfuseInvalidArgument);
  EXPECT_EQ(calls, 0);
}

TEST(Api, OutOfRangeEnumsAreRefusedAtTheBoundary) {
  int v = 99;
  arfuseDataType_t dt;
  std::memcpy(&dt, &v, sizeof dt);  // what a C caller can pass; never loaded as the enum by the library
  EXPECT_EQ(arfuseAddRmsNorm(hostBuf, hostBuf + 4096, hostBuf + 8192, 1e-6f, hostBuf + 12288, hostBuf + 16384, 1, 64,
                             dt, nullptr),
            arfuseInvalidArgument);
  EXPECT_NE(last().find("arfuseAddRmsNorm: dtype=99: unknown"), std::string::npos) << last();
  EXPECT_EQ(arfuseAllReduce(hostBuf, hostBuf, 1, 64, dt, nullptr, nullptr), arfuseInvalidArgument);
  EXPECT_NE(last().find("arfuseAllReduce: dtype=99: unknown"), std::string::npos) << last();
  arfuseResult_t r;
  std::memcpy(&r, &v, sizeof r);
  EXPECT_STREQ(arfuseGetErrorName(r), "arfuseUnknownResult");
  arfuseAlgo_t a;
  std::memcpy(&a, &v, sizeof a);
  EXPECT_STREQ(arfuseAlgoName(a), "unknown");
  EXPECT_STREQ(arfuseDataTypeName(dt), "unknown");
}

TEST(Api, ErrorNamesAndStrings) {
  for (int r = 0; r < arfuseNumResults; ++r) {
    EXPECT_STRNE(arfuseGetErrorString(arfuseResult_t(r)), "unknown result code");
    EXPECT_EQ(std::string(arfuseGetErrorName(arfuseResult_t(r))).rfind("arfuse", 0), 0u);
  }
  EXPECT_STREQ(arfuseGetErrorName(arfuseResult_t(99)), "arfuseUnknownResult");
  EXPECT_STREQ(arfuseAlgoName(arfuseAlgoTwoShot), "twoshot");
  EXPECT_STREQ(arfuseDataTypeName(arfuseFloat16), "fp16");
  int v = 0;
  EXPECT_EQ(arfuseGetVersion(&v), arfuseSuccess);
  EXPECT_EQ(v, ARFUSE_VERSION_CODE);
  EXPECT_NE(std::string(arfuseGetBuildInfo()).find("archs"), std::string::npos);
}

TEST(Api, InitArgumentErrorsNameTheArgument) {
  arfuseComm_t comms[4];
  int devs[4] = {0, 0, 0, 0};
  EXPECT_EQ(arfuseCommInitAll(nullptr, 2, devs, nullptr), arfuseInvalidArgument);
  EXPECT_NE(last().find("comms is NULL"), std::string::npos) << last();
  EXPECT_EQ(arfuseCommInitAll(comms, 0, devs, nullptr), arfuseInvalidArgument);
  EXPECT_NE(last().find("nranks=0"), std::string::npos);
  EXPECT_EQ(arfuseCommInitAll(comms, 17, devs, nullptr), arfuseInvalidArgument);
  EXPECT_EQ(arfuseCommInitAll(comms, 2, nullptr, nullptr), arfuseInvalidArgument);
  EXPECT_NE(last().find("devices is NULL"), std::string::npos);
  arfuseConfig_t bad = ARFUSE_CONFIG_INITIALIZER;
  bad.maxTokens = -5;
  EXPECT_EQ(arfuseCommInitAll(comms, 2, devs, &bad), arfuseInvalidArgument);
  EXPECT_NE(last().find("maxTokens=-5"), std::string::npos);
}

TEST(Api, InitWithoutGpuSaysNoDevice) {
  if (hasGpu()) GTEST_SKIP() << "a GPU is visible; the no-device path is tested on CPU-only machines";
  arfuseComm_t comms[2];
  int devs[2] = {0, 0};
  EXPECT_EQ(arfuseCommInitAll(comms, 2, devs, nullptr), arfuseNoDevice);
  EXPECT_NE(last().find("no CUDA device"), std::string::npos) << last();
}

TEST(Api, AddRmsNormWithoutGpuSaysNoDevice) {
  if (hasGpu()) GTEST_SKIP() << "a GPU is visible; the no-device path is tested on CPU-only machines";
  char* b = hostBuf;
  const size_t bytes = 2 * 64 * 2;
  EXPECT_EQ(arfuseAddRmsNorm(b, b + bytes, b + 2 * bytes, 1e-6f, b + 3 * bytes, b + 4 * bytes, 2, 64, arfuseBfloat16,
                             nullptr),
            arfuseNoDevice);
  EXPECT_NE(last().find("no usable current CUDA device"), std::string::npos) << last();
}

TEST(Api, BadHandlesAreRejectedWithoutDereferencing) {
  EXPECT_EQ(arfuseAllReduce(hostBuf, hostBuf, 1, 8, arfuseBfloat16, nullptr, nullptr), arfuseInvalidArgument);
  EXPECT_NE(last().find("comm is NULL"), std::string::npos);
  // A pointer that was never a communicator: refused by the registry, never read.
  arfuseComm_t fake = reinterpret_cast<arfuseComm_t>(hostBuf + 16);
  EXPECT_EQ(arfuseAllReduce(hostBuf, hostBuf, 1, 8, arfuseBfloat16, fake, nullptr), arfuseInvalidUsage);
  EXPECT_NE(last().find("not a live arfuse communicator"), std::string::npos);
  EXPECT_EQ(arfuseCommDestroy(fake), arfuseInvalidUsage);
  int rank = 0;
  EXPECT_EQ(arfuseCommRank(fake, &rank), arfuseInvalidUsage);
}

TEST(Api, GroupEndWithoutStart) {
  EXPECT_EQ(arfuseGroupEnd(), arfuseInvalidUsage);
  EXPECT_NE(last().find("without a matching"), std::string::npos);
}

TEST(Api, AddRmsNormChecksArgumentsBeforeTouchingTheDevice) {
  char* b = hostBuf;
  const int tokens = 2, hidden = 64;
  const size_t bytes = tokens * hidden * 2;
  char *x = b, *res = b + bytes, *w = b + 2 * bytes, *norm = b + 3 * bytes, *rout = b + 4 * bytes;
  struct Case {
    arfuseResult_t want;
    const char* needle;
    arfuseResult_t got;
  };
  Case cases[] = {
      {arfuseInvalidArgument, "x is NULL",
       arfuseAddRmsNorm(nullptr, res, w, 1e-6f, norm, rout, tokens, hidden, arfuseBfloat16, nullptr)},
      {arfuseInvalidArgument, "16-byte aligned",
       arfuseAddRmsNorm(x + 2, res, w, 1e-6f, norm, rout, tokens, hidden, arfuseBfloat16, nullptr)},
      {arfuseInvalidArgument, "eps=0",
       arfuseAddRmsNorm(x, res, w, 0.f, norm, rout, tokens, hidden, arfuseBfloat16, nullptr)},
      {arfuseInvalidArgument, "hidden=60",
       arfuseAddRmsNorm(x, res, w, 1e-6f, norm, rout, tokens, 60, arfuseBfloat16, nullptr)},
      {arfuseInvalidArgument, "tokens=0",
       arfuseAddRmsNorm(x, res, w, 1e-6f, norm, rout, 0, hidden, arfuseBfloat16, nullptr)},
      {arfuseInvalidArgument, "dtype=9",
       arfuseAddRmsNorm(x, res, w, 1e-6f, norm, rout, tokens, hidden, arfuseDataType_t(9), nullptr)},
      {arfuseInvalidArgument, "overlap",
       arfuseAddRmsNorm(x, res, w, 1e-6f, res, rout, tokens, hidden, arfuseBfloat16, nullptr)},
      {arfuseUnsupported, "largest supported hidden size",
       arfuseAddRmsNorm(x, res, w, 1e-6f, norm, rout, 1, 40000, arfuseBfloat16, nullptr)},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.got, c.want) << c.needle;
  }
  // Messages: re-run each to read its text (last error is per thread and overwritten).
  arfuseAddRmsNorm(x, res, w, 1e-6f, norm, rout, tokens, 60, arfuseBfloat16, nullptr);
  EXPECT_NE(last().find("hidden=60"), std::string::npos) << last();
  arfuseAddRmsNorm(x, res, w, 1e-6f, res, rout, tokens, hidden, arfuseBfloat16, nullptr);
  EXPECT_NE(last().find("norm_out="), std::string::npos) << last();
}

TEST(Api, AddRmsNormRejectsHostMemory) {
  if (!hasGpu()) GTEST_SKIP() << "no GPU visible: pointer-kind checks need the CUDA driver";
  char* b = hostBuf;
  const size_t bytes = 2 * 64 * 2;
  EXPECT_EQ(arfuseAddRmsNorm(b, b + bytes, b + 2 * bytes, 1e-6f, b + 3 * bytes, b + 4 * bytes, 2, 64, arfuseBfloat16,
                             nullptr),
            arfuseInvalidArgument);
  EXPECT_NE(last().find("not device memory"), std::string::npos) << last();
}

}  // namespace
