// The same protocols over distinct GPUs (one rank per GPU, peer access), plus the NCCL path and a
// mixed group (two virtual ranks on each of two GPUs). Requirement in the name: Gpu2_*.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "harness/harness.h"

namespace arfuse {
namespace {

using harness::CaseResult;
using harness::CaseSpec;
using harness::World;

std::vector<int> allGpus() {
  std::vector<int> d(harness::deviceCount());
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<int>(i);
  return d;
}

class Gpu2_DistinctGpus : public ::testing::TestWithParam<int> {};

TEST_P(Gpu2_DistinctGpus, MatrixAgainstFp64) {
  const int algo = GetParam();
  World w(allGpus(), 1024, 8192, algo, 20000);
  ASSERT_TRUE(w.ok()) << w.error();
  uint64_t seed = 40 + algo;
  int cases = 0;
  for (arfuseDataType_t dt : {arfuseBfloat16, arfuseFloat16, arfuseFloat32}) {
    for (int hidden : {128, 4096, 5120, 7168, 8192}) {
      for (int tokens : {1, 3, 16, 64, 255, 1024}) {
        for (int variant = 0; variant < 3; ++variant) {
          if (variant > 0 && tokens > 255) continue;
          if (algo == arfuseAlgoLowLatency && static_cast<long long>(tokens) * hidden * (dt == arfuseFloat32 ? 4 : 2) >
                                                  64 * 1024)
            continue;
          CaseSpec s;
          s.dtype = dt;
          s.hidden = hidden;
          s.tokens = tokens;
          s.inPlace = variant == 1;
          s.op = variant == 2 ? arfuseOpAllReduce : arfuseOpAllReduceAddRmsNorm;
          s.seed = ++seed;
          CaseResult r = w.run(s);
          ++cases;
          ASSERT_TRUE(r.ok) << w.nranks() << " GPUs " << arfuseAlgoName(arfuseAlgo_t(algo)) << " "
                            << arfuseDataTypeName(dt) << " tokens=" << tokens << " hidden=" << hidden
                            << " variant=" << variant << ": " << r.error;
        }
      }
    }
  }
  std::printf("[ info ] %d GPUs %s: %d cases passed\n", w.nranks(), algo < 0 ? "auto" : arfuseAlgoName(arfuseAlgo_t(algo)), cases);
}

TEST_P(Gpu2_DistinctGpus, BackToBackAndGraphs) {
  const int algo = GetParam();
  World w(allGpus(), 64, 8192, algo, 20000);
  ASSERT_TRUE(w.ok()) << w.error();
  const bool ll = algo == arfuseAlgoLowLatency;
  CaseSpec s;
  s.tokens = ll ? 3 : 16;
  s.hidden = 4096;
  s.seed = 5;
  CaseResult r = w.runBackToBack(s, 1000);
  EXPECT_TRUE(r.ok) << r.error;
  s.tokens = ll ? 4 : 5;
  s.hidden = 7168;
  r = w.runGraph(s, 50, 4);
  EXPECT_TRUE(r.ok) << r.error;
  r = w.runSequence(s, ll ? std::vector<int>{1, 4, 3, 2} : std::vector<int>{1, 64, 3, 17});
  EXPECT_TRUE(r.ok) << r.error;
}

INSTANTIATE_TEST_SUITE_P(Algos, Gpu2_DistinctGpus,
                         ::testing::Values(int(arfuseAlgoOneShot), int(arfuseAlgoTwoShot), int(arfuseAlgoNccl),
                                           int(arfuseAlgoLowLatency), int(arfuseAlgoHostStaged), -1),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string(i.param < 0 ? "auto" : arfuseAlgoName(arfuseAlgo_t(i.param)));
                         });

TEST(Gpu2_Mixed, TwoVirtualRanksOnEachOfTwoGpus) {
  World w({0, 0, 1, 1}, 256, 8192, -1, 20000);
  ASSERT_TRUE(w.ok()) << w.error();
  int isVirtual = 0;
  arfuseCommIsVirtual(w.comm(0), &isVirtual);
  EXPECT_EQ(isVirtual, 1);
  for (int tokens : {1, 7, 256}) {
    CaseSpec s;
    s.tokens = tokens;
    s.hidden = 7168;
    s.seed = tokens;
    CaseResult r = w.run(s);
    EXPECT_TRUE(r.ok) << tokens << ": " << r.error;
  }
}

}  // namespace
}  // namespace arfuse
