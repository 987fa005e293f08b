// Every protocol on one GPU through virtual ranks (several ranks sharing GPU 0), against an fp64
// reference, with bitwise equality across ranks. Requirement in the name: Gpu_*.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "harness/harness.h"

namespace arfuse {
namespace {

using harness::CaseResult;
using harness::CaseSpec;
using harness::World;

const arfuseDataType_t kDtypes[] = {arfuseBfloat16, arfuseFloat16, arfuseFloat32};
const int kHiddens[] = {128, 4096, 5120, 7168, 8192};
const int kTokens[] = {1, 3, 16, 64, 255, 1024};

std::vector<int> onGpu0(int n) { return std::vector<int>(n, 0); }

// The low-latency path carries at most 64 KiB per rank in one phase and up to 512 KiB in its
// two-phase variant where the tiles fit its regions; forced beyond that it is refused (tested in
// LowLatencyRefusesLargeMessages), so the shared cases skip the shapes the plan refuses for it. Run
// with ARFUSE_LL_TWO_PHASE=1 (ctest gpu_test_ll_two_phase) every low-latency case is two-phase.
bool fits(World& w, int algo, const CaseSpec& s) {
  if (algo != arfuseAlgoLowLatency) return true;
  arfusePlan_t p;
  return arfuseCommQueryPlan(w.comm(0), s.op, s.tokens, s.hidden, s.dtype, &p) == arfuseSuccess;
}

std::string describe(int n, int algo, const CaseSpec& s) {
  return std::to_string(n) + " ranks " + arfuseAlgoName(arfuseAlgo_t(algo)) + " " + arfuseDataTypeName(s.dtype) +
         " tokens=" + std::to_string(s.tokens) + " hidden=" + std::to_string(s.hidden) +
         (s.inPlace ? " in-place" : "") + (s.op == arfuseOpAllReduce ? " allreduce" : " fused");
}

class Gpu_VirtualRanks : public ::testing::TestWithParam<std::tuple<int, int>> {};

// The full matrix: dtypes x hidden sizes x token counts, fused, out of place; plus in-place and
// all-reduce-only variants on every shape with fewer tokens.
TEST_P(Gpu_VirtualRanks, MatrixAgainstFp64) {
  const int n = std::get<0>(GetParam()), algo = std::get<1>(GetParam());
  const bool full = n == 2 || n == 4 || n == 8;
  World w(onGpu0(n), 1024, 8192, algo, 20000);
  ASSERT_TRUE(w.ok()) << w.error();
  int cases = 0;
  uint64_t seed = 1000 * n + algo;
  for (arfuseDataType_t dt : kDtypes) {
    for (int hidden : kHiddens) {
      for (int tokens : kTokens) {
        if (!full && tokens != 1 && tokens != 16 && tokens != 255) continue;
        for (int variant = 0; variant < 3; ++variant) {
          CaseSpec s;
          s.dtype = dt;
          s.hidden = hidden;
          s.tokens = tokens;
          s.seed = ++seed;
          s.inPlace = variant == 1;
          s.op = variant == 2 ? arfuseOpAllReduce : arfuseOpAllReduceAddRmsNorm;
          if (variant > 0 && tokens > 255) continue;
          if (!fits(w, algo, s)) continue;
          CaseResult r = w.run(s);
          ++cases;
          ASSERT_TRUE(r.ok) << describe(n, algo, s) << ": " << r.error;
          ASSERT_EQ(r.algo, arfuseAlgoName(arfuseAlgo_t(algo)));
        }
      }
    }
  }
  std::printf("[ info ] %d ranks %s: %d cases passed\n", n, arfuseAlgoName(arfuseAlgo_t(algo)), cases);
}

// 1000 calls back to back without host synchronisation, the residual chained through every call.
TEST_P(Gpu_VirtualRanks, ThousandBackToBackCalls) {
  const int n = std::get<0>(GetParam()), algo = std::get<1>(GetParam());
  World w(onGpu0(n), 64, 8192, algo, 20000);
  ASSERT_TRUE(w.ok()) << w.error();
  for (bool inPlace : {false, true}) {
    CaseSpec s;
    s.dtype = inPlace ? arfuseFloat32 : arfuseBfloat16;
    s.tokens = algo == arfuseAlgoLowLatency ? 3 : 16;
    s.hidden = 4096;
    s.inPlace = inPlace;
    s.seed = 77 + n;
    CaseResult r = w.runBackToBack(s, 1000);
    EXPECT_TRUE(r.ok) << describe(n, algo, s) << ": " << r.error;
  }
}

// 50 calls captured in a CUDA graph, replayed with new inputs written between replays.
TEST_P(Gpu_VirtualRanks, GraphReplayWithNewInputs) {
  const int n = std::get<0>(GetParam()), algo = std::get<1>(GetParam());
  World w(onGpu0(n), 64, 8192, algo, 20000);
  ASSERT_TRUE(w.ok()) << w.error();
  CaseSpec s;
  s.dtype = arfuseBfloat16;
  s.tokens = algo == arfuseAlgoLowLatency ? 4 : 5;
  s.hidden = 7168;
  s.seed = 31 + n;
  CaseResult r = w.runGraph(s, 50, 4);
  EXPECT_TRUE(r.ok) << describe(n, algo, s) << ": " << r.error;
}

// Geometry changes from call to call (1 block, many blocks, ...) with no sync in between: the
// epoch/parity protocol must not let a new call's copy-in overwrite what a peer still reads.
TEST_P(Gpu_VirtualRanks, ChangingShapesBackToBack) {
  const int n = std::get<0>(GetParam()), algo = std::get<1>(GetParam());
  World w(onGpu0(n), 1024, 8192, algo, 20000);
  ASSERT_TRUE(w.ok()) << w.error();
  for (int round = 0; round < 3; ++round) {
    CaseSpec s;
    s.dtype = arfuseFloat16;
    s.hidden = 2048;
    s.seed = 500 + round;
    CaseResult r = w.runSequence(
        s, algo == arfuseAlgoLowLatency ? std::vector<int>{1, 16, 3, 9} : std::vector<int>{1, 1024, 3, 200});
    ASSERT_TRUE(r.ok) << describe(n, algo, s) << ": " << r.error;
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, Gpu_VirtualRanks,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8, 16),
                                            ::testing::Values(int(arfuseAlgoOneShot), int(arfuseAlgoTwoShot),
                                                              int(arfuseAlgoLowLatency), int(arfuseAlgoHostStaged))),
                         [](const ::testing::TestParamInfo<std::tuple<int, int>>& i) {
                           return std::to_string(std::get<0>(i.param)) + "ranks_" +
                                  arfuseAlgoName(arfuseAlgo_t(std::get<1>(i.param)));
                         });

TEST(Gpu_VirtualRanks, AutoPlanIsWhatRuns) {
  World w(onGpu0(4), 1024, 8192, -1);
  ASSERT_TRUE(w.ok()) << w.error();
  for (int tokens : {1, 1024}) {
    arfusePlan_t p;
    ASSERT_EQ(arfuseCommQueryPlan(w.comm(0), arfuseOpAllReduceAddRmsNorm, tokens, 8192, arfuseBfloat16, &p),
              arfuseSuccess);
    CaseSpec s;
    s.tokens = tokens;
    s.hidden = 8192;
    CaseResult r = w.run(s);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.algo, arfuseAlgoName(p.algo)) << p.reason;
    EXPECT_EQ(p.algo, tokens == 1 ? arfuseAlgoLowLatency : arfuseAlgoTwoShot) << p.reason;  // 4 ranks
  }
}

// Rows narrower than (n - 1)^2 vectors: two-shot's pushed parts take more room than the row
// (device/args.h twoShotTileVecs: 9 vectors of bf16 at 8 ranks take 14), over peer access and in
// the host-staged path's two-shot variant (1024 tokens: 1 MiB of peer bytes, above its one-shot limit).
TEST(Gpu_VirtualRanks, TwoShotRowsNarrowerThanItsSlots) {
  for (int algo : {int(arfuseAlgoTwoShot), int(arfuseAlgoHostStaged)}) {
    World w(onGpu0(8), 1024, 72, algo, 20000);
    ASSERT_TRUE(w.ok()) << w.error();
    uint64_t seed = 9100 + algo;
    for (int tokens : {1, 17, 300, 1024}) {
      CaseSpec s;
      s.dtype = arfuseBfloat16;
      s.hidden = 72;
      s.tokens = tokens;
      s.seed = ++seed;
      CaseResult r = w.run(s);
      ASSERT_TRUE(r.ok) << describe(8, algo, s) << ": " << r.error;
      ASSERT_EQ(r.algo, arfuseAlgoName(arfuseAlgo_t(algo)));
    }
  }
}

// Forced above its one-phase limit the low-latency path runs its two-phase variant (and says so);
// above what that carries it is refused with the limit named.
TEST(Gpu_VirtualRanks, LowLatencyRefusesLargeMessages) {
  World w(onGpu0(2), 256, 4096, arfuseAlgoLowLatency, 20000);
  ASSERT_TRUE(w.ok()) << w.error();
  arfusePlan_t p;
  ASSERT_EQ(arfuseCommQueryPlan(w.comm(0), arfuseOpAllReduceAddRmsNorm, 9, 4096, arfuseBfloat16, &p), arfuseSuccess);
  EXPECT_NE(std::string(p.reason).find("two-phase variant"), std::string::npos) << p.reason;
  CaseSpec s;
  s.tokens = 9;
  s.hidden = 4096;
  s.seed = 41;
  CaseResult r = w.run(s);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(arfuseCommQueryPlan(w.comm(0), arfuseOpAllReduceAddRmsNorm, 129, 4096, arfuseBfloat16, &p),
            arfuseUnsupported);
  EXPECT_NE(std::string(arfuseCommGetLastError(w.comm(0))).find("carries at most 65536 B"), std::string::npos)
      << arfuseCommGetLastError(w.comm(0));
}

// Small calls take the low-latency path and larger ones one-shot/two-shot, interleaved without
// synchronisation: parity and epochs are shared by every path.
TEST(Gpu_VirtualRanks, MixedPathsBackToBack) {
  World w(onGpu0(4), 1024, 2048, -1, 20000);
  ASSERT_TRUE(w.ok()) << w.error();
  for (int round = 0; round < 3; ++round) {
    CaseSpec s;
    s.dtype = arfuseBfloat16;
    s.hidden = 2048;
    s.seed = 700 + round;
    CaseResult r = w.runSequence(s, {1, 1024, 16, 40});  // lowlatency, twoshot, lowlatency, oneshot
    ASSERT_TRUE(r.ok) << r.error;
  }
}

TEST(Gpu_VirtualRanks, NcclIsRefusedWithAReason) {
  arfuseComm_t comms[2];
  int devs[2] = {0, 0};
  arfuseConfig_t cfg = ARFUSE_CONFIG_INITIALIZER;
  cfg.algo = arfuseAlgoNccl;
  cfg.maxTokens = 4;
  cfg.maxHidden = 1024;
  EXPECT_EQ(arfuseCommInitAll(comms, 2, devs, &cfg), arfuseUnsupported);
  EXPECT_NE(std::string(arfuseGetLastError()).find("one device per rank"), std::string::npos) << arfuseGetLastError();
}

// The host-staged path picks its variant by size (one-shot while each rank reads little over its
// link, two-shot beyond) and says which; both variants interleave without synchronisation.
TEST(Gpu_VirtualRanks, HostStagedVariantsBySize) {
  World w(onGpu0(4), 256, 7168, arfuseAlgoHostStaged, 20000);
  ASSERT_TRUE(w.ok()) << w.error();
  arfusePlan_t p;
  ASSERT_EQ(arfuseCommQueryPlan(w.comm(0), arfuseOpAllReduceAddRmsNorm, 1, 7168, arfuseBfloat16, &p), arfuseSuccess);
  EXPECT_EQ(p.algo, arfuseAlgoHostStaged);
  EXPECT_NE(std::string(p.reason).find("one-shot variant"), std::string::npos) << p.reason;
  ASSERT_EQ(arfuseCommQueryPlan(w.comm(0), arfuseOpAllReduceAddRmsNorm, 64, 7168, arfuseBfloat16, &p), arfuseSuccess);
  EXPECT_NE(std::string(p.reason).find("two-shot variant"), std::string::npos) << p.reason;
  for (int round = 0; round < 3; ++round) {
    CaseSpec s;
    s.dtype = arfuseBfloat16;
    s.hidden = 7168;
    s.seed = 900 + round;
    CaseResult r = w.runSequence(s, {1, 64, 2, 256});  // one-shot, two-shot, one-shot, two-shot
    ASSERT_TRUE(r.ok) << r.error;
  }
}

// Skipped calls, divergent calls, late ranks and two streams at once: fault_test.cc.

TEST(Gpu_Api, DestroyedHandleAndForeignMemory) {
  arfuseComm_t comms[2];
  int devs[2] = {0, 0};
  arfuseConfig_t cfg = ARFUSE_CONFIG_INITIALIZER;
  cfg.maxTokens = 4;
  cfg.maxHidden = 1024;
  ASSERT_EQ(arfuseCommInitAll(comms, 2, devs, &cfg), arfuseSuccess) << arfuseGetLastError();
  int isVirtual = 0, count = 0;
  EXPECT_EQ(arfuseCommIsVirtual(comms[0], &isVirtual), arfuseSuccess);
  EXPECT_EQ(isVirtual, 1);
  EXPECT_EQ(arfuseCommCount(comms[1], &count), arfuseSuccess);
  EXPECT_EQ(count, 2);
  alignas(16) static char host[4 * 1024 * 2];
  void* dev;
  cudaMalloc(&dev, sizeof host);
  EXPECT_EQ(arfuseAllReduce(host, dev, 4, 1024, arfuseBfloat16, comms[0], nullptr), arfuseInvalidArgument);
  EXPECT_NE(std::string(arfuseCommGetLastError(comms[0])).find("in="), std::string::npos);
  EXPECT_EQ(arfuseAllReduce(dev, dev, 5, 1024, arfuseBfloat16, comms[0], nullptr), arfuseInvalidArgument);
  EXPECT_NE(std::string(arfuseCommGetLastError(comms[0])).find("maxTokens=4"), std::string::npos);
  EXPECT_EQ(arfuseCommDestroy(comms[0]), arfuseSuccess);
  EXPECT_EQ(arfuseCommDestroy(comms[1]), arfuseSuccess);
  EXPECT_EQ(arfuseAllReduce(dev, dev, 4, 1024, arfuseBfloat16, comms[0], nullptr), arfuseInvalidUsage);
  EXPECT_EQ(arfuseCommDestroy(comms[0]), arfuseInvalidUsage);
  cudaFree(dev);
}

// Issue 16: a destroyed handle is retired, never freed (src/comm/handles.h), so a communicator made
// later can never land on its address and bring the stale handle back to life.
TEST(Gpu_Api, StaleHandleStaysDeadWhileNewCommunicatorsAreMade) {
  arfuseConfig_t cfg = ARFUSE_CONFIG_INITIALIZER;
  cfg.maxTokens = 4;
  cfg.maxHidden = 1024;
  int dev = 0;
  arfuseComm_t stale = nullptr;
  ASSERT_EQ(arfuseCommInitAll(&stale, 1, &dev, &cfg), arfuseSuccess) << arfuseGetLastError();
  ASSERT_EQ(arfuseCommDestroy(stale), arfuseSuccess);
  for (int i = 0; i < 20; ++i) {
    arfuseComm_t c = nullptr;
    ASSERT_EQ(arfuseCommInitAll(&c, 1, &dev, &cfg), arfuseSuccess) << arfuseGetLastError();
    EXPECT_NE(c, stale);
    int rank = -1;
    EXPECT_EQ(arfuseCommRank(stale, &rank), arfuseInvalidUsage);
    EXPECT_EQ(rank, -1);
    EXPECT_EQ(arfuseCommDestroy(c), arfuseSuccess);
  }
}

// Single GPU: arfuseAddRmsNorm against fp64, in and out of place, every dtype.
TEST(Gpu_AddRmsNorm, MatchesFp64) {
  World w(onGpu0(1), 1024, 16384, -1);
  ASSERT_TRUE(w.ok()) << w.error();
  uint64_t seed = 9;
  for (arfuseDataType_t dt : kDtypes) {
    for (int hidden : {8, 128, 4096, 7168, 16384}) {
      for (int tokens : {1, 7, 64, 1024}) {
        for (int variant = 0; variant < 4; ++variant) {
          CaseSpec s;
          s.dtype = dt;
          s.hidden = hidden;
          s.tokens = tokens;
          s.inPlace = variant & 1;
          s.direct = variant & 2;  // arfuseAddRmsNorm itself, or a 1-rank communicator
          s.seed = ++seed;
          CaseResult r = w.run(s);
          ASSERT_TRUE(r.ok) << describe(1, arfuseAlgoLocal, s) << (s.direct ? " direct" : "") << ": " << r.error;
          EXPECT_EQ(r.algo, "local");
        }
      }
    }
  }
}

}  // namespace
}  // namespace arfuse
