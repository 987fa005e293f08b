// The same protocols over distinct GPUs (one rank per GPU, peer access), plus the NCCL path and a
// mixed group (two virtual ranks on each of two GPUs). Requirement in the name: Gpu2_*.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "fused_check.h"
#include "gpu_fixture.h"
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
          if (algo == arfuseAlgoLowLatency &&
              static_cast<long long>(tokens) * hidden * (dt == arfuseFloat32 ? 4 : 2) > 64 * 1024)
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
  std::printf("[ info ] %d GPUs %s: %d cases passed\n", w.nranks(),
              algo < 0 ? "auto" : arfuseAlgoName(arfuseAlgo_t(algo)), cases);
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

// ---- Issue 15 item 2: several calls per rank inside one arfuseGroupStart/End, mixed paths ------
//
// Three groups over GPUs 0 and 1 (NCCL forced; low-latency forced; one-shot forced) whose rank r
// share one non-blocking stream S_r, driven from one host thread. The calls are chained (each
// reads the previous call's outputs) and include two NCCL-path calls in a row, so every one of
// them is wrong (NaN, from the poisoned outputs, or the wrong sum) if a stream's order is lost:
// an all-reduce before the previous epilogue, an arfuse-path call before an NCCL call's epilogue,
// or two epilogues reading one sum.

using fusedcheck::Host;
using fusedcheck::Tensor;

constexpr int kGroupTokens = 4, kGroupHidden = 4096;  // 32 KiB bf16: fits the low-latency path
constexpr size_t kGroupElems = static_cast<size_t>(kGroupTokens) * kGroupHidden;
constexpr float kGroupEps = 1e-6f;

// The group of GPUs 0 and 1 forced onto `algo`; the chain's streams serve every such group.
struct Comms : gpufixture::CommGroup {
  explicit Comms(int algo) : CommGroup({0, 1}) {
    create(gpufixture::testConfig(kGroupTokens, kGroupHidden, algo, 20000, ARFUSE_DTYPE_BIT(arfuseBfloat16)));
  }
};

// One call of the chain: which comms, and which tensors (per rank) it reads and writes.
struct Step {
  const Comms* comms;
  bool fused;
  int x, res, norm, rout;  // tensor indices (rout: the AllReduce output when !fused); -1 unused
};

struct Chain {
  std::vector<std::unique_ptr<Tensor>> t[2];  // per rank
  cudaStream_t stream[2];
  Host weight;
  Chain(int tensors, std::mt19937& rng) {
    weight = fusedcheck::randomBf16(kGroupHidden, rng);
    for (int r = 0; r < 2; ++r) {
      cudaSetDevice(r);
      cudaStreamCreateWithFlags(&stream[r], cudaStreamNonBlocking);
      for (int i = 0; i < tensors; ++i) t[r].emplace_back(new Tensor(r, i == 0 ? kGroupHidden : kGroupElems));
      t[r][0]->upload(weight);  // tensor 0: the weight, equal on both ranks
    }
  }
  ~Chain() {
    for (int r = 0; r < 2; ++r) cudaStreamDestroy(stream[r]);
  }
  arfuseResult_t call(const Step& s, int r) {
    const arfuseComm_t c = s.comms->comms[r];
    if (!s.fused)
      return arfuseAllReduce(t[r][s.x]->d, t[r][s.rout]->d, kGroupTokens, kGroupHidden, arfuseBfloat16, c, stream[r]);
    return arfuseAllReduceAddRmsNorm(t[r][s.x]->d, t[r][s.res]->d, t[r][0]->d, kGroupEps, t[r][s.norm]->d,
                                     t[r][s.rout]->d, kGroupTokens, kGroupHidden, arfuseBfloat16, c, stream[r]);
  }
};

// Every step against fp64 from its inputs as read back (so a step that ran before its inputs were
// written shows as a wrong or NaN output), and bitwise equal on both ranks.
void checkChain(Chain& ch, const std::vector<Step>& steps, const std::string& label) {
  for (size_t k = 0; k < steps.size(); ++k) {
    const Step& s = steps[k];
    const std::vector<Host> xs = {ch.t[0][s.x]->download(), ch.t[1][s.x]->download()};
    const Host out0 = ch.t[0][s.rout]->download(), out1 = ch.t[1][s.rout]->download();
    EXPECT_EQ(out0, out1) << label << " step " << k << ": ranks differ";
    if (!s.fused) {
      EXPECT_LT(fusedcheck::relErr(fusedcheck::sumReference(xs), out0), fusedcheck::kBf16Tolerance)
          << label << " step " << k;
      continue;
    }
    const Host res = ch.t[0][s.res]->download();
    ASSERT_EQ(res, ch.t[1][s.res]->download()) << label << " step " << k << ": residual_in replicas differ";
    const fusedcheck::FusedRef ref =
        fusedcheck::fusedReference(xs, res, ch.weight, kGroupTokens, kGroupHidden, kGroupEps);
    EXPECT_LT(fusedcheck::relErr(ref.residual, out0), fusedcheck::kBf16Tolerance) << label << " step " << k;
    EXPECT_LT(fusedcheck::relErr(ref.norm, ch.t[0][s.norm]->download()), fusedcheck::kBf16Tolerance)
        << label << " step " << k;
    EXPECT_EQ(ch.t[0][s.norm]->download(), ch.t[1][s.norm]->download()) << label << " step " << k;
  }
}

TEST(Gpu2_Groups, SeveralChainedCallsPerRankOfMixedPathsInOneGroup) {
  if (harness::deviceCount() < 2) GTEST_SKIP() << "needs 2 GPUs";
  Comms nccl(arfuseAlgoNccl), ll(arfuseAlgoLowLatency), one(arfuseAlgoOneShot);
  ASSERT_EQ(nccl.init, arfuseSuccess) << arfuseGetLastError();
  ASSERT_EQ(ll.init, arfuseSuccess) << arfuseGetLastError();
  ASSERT_EQ(one.init, arfuseSuccess) << arfuseGetLastError();
  // Tensors: 0 weight; 1 x0; 2 residual0; then per step k >= 0 its norm 3+2k and residual 4+2k;
  // 15, 16 fresh x for steps 3 and 4; 17 the plain all-reduce's output.
  const std::vector<Step> steps = {
      {&nccl, true, 1, 2, 3, 4},       // NCCL
      {&ll, true, 3, 4, 5, 6},         // low-latency, reads step 0's outputs
      {&nccl, true, 5, 6, 7, 8},       // NCCL after an arfuse-path call
      {&one, true, 15, 8, 9, 10},      // one-shot, fresh x, step 2's residual
      {&nccl, true, 16, 10, 11, 12},   // NCCL
      {&nccl, true, 11, 12, 13, 14},   // NCCL right after NCCL, reading its outputs
      {&nccl, false, 13, -1, -1, 17},  // plain NCCL all-reduce of step 5's norm
  };
  for (int order = 0; order < 2; ++order) {  // 0: for each rank, every call; 1: for each call, every rank
    for (int trial = 0; trial < 3; ++trial) {
      std::mt19937 rng(1000 * order + trial);
      Chain ch(18, rng);
      const Host res0 = fusedcheck::randomBf16(kGroupElems, rng);
      for (int r = 0; r < 2; ++r) {
        ch.t[r][1]->upload(fusedcheck::randomBf16(kGroupElems, rng));
        ch.t[r][2]->upload(res0);
        ch.t[r][15]->upload(fusedcheck::randomBf16(kGroupElems, rng));
        ch.t[r][16]->upload(fusedcheck::randomBf16(kGroupElems, rng));
      }
      ASSERT_EQ(arfuseGroupStart(), arfuseSuccess);
      for (int a = 0; a < (order == 0 ? 2 : static_cast<int>(steps.size())); ++a)
        for (int b = 0; b < (order == 0 ? static_cast<int>(steps.size()) : 2); ++b) {
          const int r = order == 0 ? a : b, k = order == 0 ? b : a;
          ASSERT_EQ(ch.call(steps[k], r), arfuseSuccess) << arfuseGetLastError();
        }
      ASSERT_EQ(arfuseGroupEnd(), arfuseSuccess) << arfuseGetLastError();
      for (int r = 0; r < 2; ++r) ASSERT_EQ(cudaStreamSynchronize(ch.stream[r]), cudaSuccess);
      checkChain(ch, steps, "order " + std::to_string(order) + " trial " + std::to_string(trial));
    }
  }
}

// The original defect, alone: two independent NCCL-path fused calls per rank in one group, fresh
// inputs each; the first call's outputs must come from the first call's sum.
TEST(Gpu2_Groups, TwoIndependentNcclCallsPerRank) {
  if (harness::deviceCount() < 2) GTEST_SKIP() << "needs 2 GPUs";
  Comms nccl(arfuseAlgoNccl);
  ASSERT_EQ(nccl.init, arfuseSuccess) << arfuseGetLastError();
  const std::vector<Step> steps = {{&nccl, true, 1, 2, 3, 4}, {&nccl, true, 5, 6, 7, 8}};
  std::mt19937 rng(77);
  Chain ch(9, rng);
  for (int r = 0; r < 2; ++r)
    for (int i : {1, 5}) ch.t[r][i]->upload(fusedcheck::randomBf16(kGroupElems, rng));
  for (int i : {2, 6}) {
    const Host res = fusedcheck::randomBf16(kGroupElems, rng);
    for (int r = 0; r < 2; ++r) ch.t[r][i]->upload(res);
  }
  ASSERT_EQ(arfuseGroupStart(), arfuseSuccess);
  for (int r = 0; r < 2; ++r)
    for (const Step& s : steps) ASSERT_EQ(ch.call(s, r), arfuseSuccess) << arfuseGetLastError();
  ASSERT_EQ(arfuseGroupEnd(), arfuseSuccess) << arfuseGetLastError();
  for (int r = 0; r < 2; ++r) ASSERT_EQ(cudaStreamSynchronize(ch.stream[r]), cudaSuccess);
  checkChain(ch, steps, "independent");
}

// A rank that switches streams inside a group after a deferred call is refused (no event could
// order the two); the group's other calls still run and are correct.
TEST(Gpu2_Groups, AnotherStreamAfterADeferredCallIsRefused) {
  if (harness::deviceCount() < 2) GTEST_SKIP() << "needs 2 GPUs";
  Comms nccl(arfuseAlgoNccl);
  ASSERT_EQ(nccl.init, arfuseSuccess) << arfuseGetLastError();
  std::mt19937 rng(5);
  Chain ch(5, rng);
  const Host res = fusedcheck::randomBf16(kGroupElems, rng);
  for (int r = 0; r < 2; ++r) {
    ch.t[r][1]->upload(fusedcheck::randomBf16(kGroupElems, rng));
    ch.t[r][2]->upload(res);
  }
  cudaSetDevice(0);
  cudaStream_t other;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  const Step step{&nccl, true, 1, 2, 3, 4};
  Tensor out(0, kGroupElems);
  ASSERT_EQ(arfuseGroupStart(), arfuseSuccess);
  ASSERT_EQ(ch.call(step, 0), arfuseSuccess) << arfuseGetLastError();
  ASSERT_EQ(ch.call(step, 1), arfuseSuccess) << arfuseGetLastError();
  EXPECT_EQ(arfuseAllReduce(ch.t[0][3]->d, out.d, kGroupTokens, kGroupHidden, arfuseBfloat16, nccl.comms[0], other),
            arfuseInvalidUsage);
  EXPECT_NE(std::string(arfuseCommGetLastError(nccl.comms[0])).find("make every call of a communicator on one stream"),
            std::string::npos)
      << arfuseCommGetLastError(nccl.comms[0]);
  ASSERT_EQ(arfuseGroupEnd(), arfuseSuccess) << arfuseGetLastError();
  for (int r = 0; r < 2; ++r) ASSERT_EQ(cudaStreamSynchronize(ch.stream[r]), cudaSuccess);
  checkChain(ch, {step}, "after a refused call");
  const Host o = out.download();
  for (uint16_t v : o) ASSERT_EQ(v, 0xFFFF) << "the refused call wrote its output";
  cudaStreamDestroy(other);
}

}  // namespace
}  // namespace arfuse
