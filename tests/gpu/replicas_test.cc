// Issue 15 item 6: ARFUSE_CHECK_REPLICAS=1 (set for this executable by CTest) on virtual ranks of
// GPU 0. Equal residual_in/weight pass on every path and the outputs match fp64; a residual_in or
// weight that differs on one rank aborts the group with arfuseMismatch naming that rank and the
// element, eagerly and in CUDA-graph replays. Requirement in the name: Gpu_*.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "fused_check.h"
#include "gpu_fixture.h"

namespace arfuse {
namespace {

using fusedcheck::Host;
using fusedcheck::Tensor;

constexpr int kHidden = 2048;
constexpr float kEps = 1e-6f;

// n virtual ranks with one non-blocking stream each, and per rank x, residual_in, weight, norm_out
// and residual_out of `tokens` rows.
struct Ranks : gpufixture::RankGroup {
  int tokens;
  std::vector<std::unique_ptr<Tensor>> x, res, w, norm, rout;
  Ranks(int nranks, int algo, int tok) : RankGroup(std::vector<int>(nranks, 0)), tokens(tok) {
    create(gpufixture::testConfig(tokens, kHidden, algo, 2000, ARFUSE_DTYPE_BIT(arfuseBfloat16)));
    const size_t e = static_cast<size_t>(tokens) * kHidden;
    for (int r = 0; r < n; ++r) {
      x.emplace_back(new Tensor(0, e));
      res.emplace_back(new Tensor(0, e));
      w.emplace_back(new Tensor(0, kHidden));
      norm.emplace_back(new Tensor(0, e));
      rout.emplace_back(new Tensor(0, e));
    }
  }
  ~Ranks() {
    cudaDeviceSynchronize();
    destroy();  // before the tensors are freed; the streams go last (RankGroup)
  }
  size_t elems() const { return static_cast<size_t>(tokens) * kHidden; }
  arfuseResult_t call(int r) {
    return arfuseAllReduceAddRmsNorm(x[r]->d, res[r]->d, w[r]->d, kEps, norm[r]->d, rout[r]->d, tokens, kHidden,
                                     arfuseBfloat16, comms[r], streams[r]);
  }
  arfuseResult_t asyncError(int r, std::string* text) {
    arfuseResult_t a = arfuseSuccess;
    arfuseCommGetAsyncError(comms[r], &a);
    *text = arfuseCommGetLastError(comms[r]);
    return a;
  }
};

const char* algoName(int a) { return arfuseAlgoName(arfuseAlgo_t(a)); }

// Fresh inputs on every rank, with one residual_in and one weight for all (equal replicas); the
// weight is returned, for a test to change one rank's copy.
Host uploadReplicas(Ranks& g, std::mt19937& rng) {
  const Host res = fusedcheck::randomBf16(g.elems(), rng);
  const Host w = fusedcheck::randomBf16(kHidden, rng);
  for (int r = 0; r < g.n; ++r) {
    g.x[r]->upload(fusedcheck::randomBf16(g.elems(), rng));
    g.res[r]->upload(res);
    g.w[r]->upload(w);
  }
  return w;
}

// Each rank's call captured into a graph of its own stream, instantiated.
::testing::AssertionResult captureEachRank(Ranks& g, std::vector<cudaGraphExec_t>* execs) {
  execs->assign(g.n, nullptr);
  for (int r = 0; r < g.n; ++r) {
    cudaGraph_t graph = nullptr;
    if (cudaStreamBeginCapture(g.streams[r], cudaStreamCaptureModeGlobal) != cudaSuccess)
      return ::testing::AssertionFailure() << "begin capture, rank " << r;
    const arfuseResult_t st = g.call(r);
    if (cudaStreamEndCapture(g.streams[r], &graph) != cudaSuccess || st != arfuseSuccess)
      return ::testing::AssertionFailure() << "capture, rank " << r << ": " << arfuseCommGetLastError(g.comms[r]);
    const cudaError_t e = cudaGraphInstantiate(&(*execs)[r], graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) return ::testing::AssertionFailure() << "instantiate, rank " << r;
  }
  return ::testing::AssertionSuccess();
}

TEST(Gpu_Replicas, TheCheckIsOn) {
  const char* v = std::getenv("ARFUSE_CHECK_REPLICAS");
  ASSERT_TRUE(v && std::string(v) == "1") << "run through CTest (gpu_replicas_test sets ARFUSE_CHECK_REPLICAS=1)";
}

// Equal replicas: no error on any path, outputs within bf16 tolerance of fp64, equal on all ranks.
TEST(Gpu_Replicas, EqualReplicasPassOnEveryPath) {
  for (int algo :
       {int(arfuseAlgoLowLatency), int(arfuseAlgoOneShot), int(arfuseAlgoTwoShot), int(arfuseAlgoHostStaged)}) {
    Ranks g(3, algo, 4);
    ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
    std::mt19937 rng(100 + algo);
    std::vector<Host> xs;
    const Host res = fusedcheck::randomBf16(g.elems(), rng), w = fusedcheck::randomBf16(kHidden, rng);
    for (int r = 0; r < g.n; ++r) {
      xs.push_back(fusedcheck::randomBf16(g.elems(), rng));
      g.x[r]->upload(xs[r]);
      g.res[r]->upload(res);
      g.w[r]->upload(w);
    }
    for (int r = 0; r < g.n; ++r) ASSERT_EQ(g.call(r), arfuseSuccess) << arfuseCommGetLastError(g.comms[r]);
    cudaDeviceSynchronize();
    std::string text;
    ASSERT_EQ(g.asyncError(0, &text), arfuseSuccess) << algoName(algo) << ": " << text;
    const fusedcheck::FusedRef ref = fusedcheck::fusedReference(xs, res, w, g.tokens, kHidden, kEps);
    const Host n0 = g.norm[0]->download(), r0 = g.rout[0]->download();
    EXPECT_LT(fusedcheck::relErr(ref.norm, n0), fusedcheck::kBf16Tolerance) << algoName(algo);
    EXPECT_LT(fusedcheck::relErr(ref.residual, r0), fusedcheck::kBf16Tolerance) << algoName(algo);
    for (int r = 1; r < g.n; ++r) EXPECT_EQ(g.norm[r]->download(), n0) << algoName(algo) << " rank " << r;
  }
}

// One element of rank 2's residual_in differs: the group is aborted with arfuseMismatch naming
// rank 2 and that element, and every later call fails fast with it.
TEST(Gpu_Replicas, DifferingResidualIsNamedEagerly) {
  for (int algo : {int(arfuseAlgoTwoShot), int(arfuseAlgoLowLatency)}) {
    Ranks g(3, algo, 4);
    ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
    std::mt19937 rng(7 + algo);
    Host res = fusedcheck::randomBf16(g.elems(), rng);
    const Host w = fusedcheck::randomBf16(kHidden, rng);
    const size_t bad = 1 + rng() % (g.elems() - 1);
    for (int r = 0; r < g.n; ++r) {
      g.x[r]->upload(fusedcheck::randomBf16(g.elems(), rng));
      Host mine = res;
      if (r == 2) mine[bad] ^= 0x0001;  // one ulp
      g.res[r]->upload(mine);
      g.w[r]->upload(w);
    }
    for (int r = 0; r < g.n; ++r) ASSERT_EQ(g.call(r), arfuseSuccess) << arfuseCommGetLastError(g.comms[r]);
    cudaDeviceSynchronize();
    std::string text;
    EXPECT_EQ(g.asyncError(1, &text), arfuseMismatch) << algoName(algo) << ": " << text;
    const std::string want = "residual_in differs between rank 0 and rank 2 at element " + std::to_string(bad) +
                             " (token " + std::to_string(bad / kHidden) + ", column " + std::to_string(bad % kHidden) +
                             ")";
    EXPECT_NE(text.find(want), std::string::npos) << algoName(algo) << ": " << text;
    EXPECT_EQ(g.call(0), arfuseMismatch) << "a later call must fail fast with the recorded error";
  }
}

// Captured once, replayed: equal data passes; after rank 1's weight changes in place (the graph
// reads the same buffers), the next replay reports it.
TEST(Gpu_Replicas, DifferingWeightIsNamedInGraphReplays) {
  Ranks g(2, arfuseAlgoOneShot, 2);
  ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
  std::mt19937 rng(99);
  Host w = uploadReplicas(g, rng);
  std::vector<cudaGraphExec_t> execs;
  ASSERT_TRUE(captureEachRank(g, &execs));
  for (int replay = 0; replay < 3; ++replay) {
    for (int r = 0; r < g.n; ++r) ASSERT_EQ(cudaGraphLaunch(execs[r], g.streams[r]), cudaSuccess);
    cudaDeviceSynchronize();
  }
  std::string text;
  ASSERT_EQ(g.asyncError(0, &text), arfuseSuccess) << text;
  const size_t bad = rng() % kHidden;
  w[bad] ^= 0x0100;
  g.w[1]->upload(w);
  for (int r = 0; r < g.n; ++r) ASSERT_EQ(cudaGraphLaunch(execs[r], g.streams[r]), cudaSuccess);
  cudaDeviceSynchronize();
  EXPECT_EQ(g.asyncError(0, &text), arfuseMismatch) << text;
  EXPECT_NE(
      text.find("weight differs between rank 0 and rank 1 at element " + std::to_string(bad) + " of checked call 4"),
      std::string::npos)
      << text;
  for (cudaGraphExec_t e : execs) cudaGraphExecDestroy(e);
}

// The abort raised by the host function reaches the device inside the stream (issue 37 item 8b,
// api/host_abort.h): the very replay that finds the difference writes no valid-looking output on any
// rank, nor do the replays after it, with no API call in between (before, the host-mapped abort
// reached the ranks' device words only at the host's next API call, so replays went on computing).
bool allNan(const Host& h) {
  for (uint16_t v : h)
    if ((v & 0x7F80) != 0x7F80 || (v & 0x007F) == 0) return false;  // bf16 NaN: exponent all ones, mantissa != 0
  return true;
}

TEST(Gpu_Replicas, TheHostRaisedAbortReachesTheReplayThatFoundIt) {
  for (int algo : {int(arfuseAlgoOneShot), int(arfuseAlgoTwoShot)}) {
    Ranks g(2, algo, 2);
    ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
    std::mt19937 rng(31 + algo);
    Host w = uploadReplicas(g, rng);
    std::vector<cudaGraphExec_t> execs;
    ASSERT_TRUE(captureEachRank(g, &execs));
    for (int r = 0; r < g.n; ++r) ASSERT_EQ(cudaGraphLaunch(execs[r], g.streams[r]), cudaSuccess);
    cudaDeviceSynchronize();
    EXPECT_FALSE(allNan(g.norm[0]->download())) << algoName(algo) << ": equal replicas must compute";
    w[rng() % kHidden] ^= 0x0100;
    g.w[1]->upload(w);
    for (int replay = 0; replay < 2; ++replay) {  // no arfuse call between these replays
      for (int r = 0; r < g.n; ++r) {
        g.norm[r]->poison();
        g.rout[r]->poison();
      }
      for (int r = 0; r < g.n; ++r) ASSERT_EQ(cudaGraphLaunch(execs[r], g.streams[r]), cudaSuccess);
      cudaDeviceSynchronize();
      for (int r = 0; r < g.n; ++r) {
        EXPECT_TRUE(allNan(g.norm[r]->download())) << algoName(algo) << " replay " << replay << " rank " << r;
        EXPECT_TRUE(allNan(g.rout[r]->download())) << algoName(algo) << " replay " << replay << " rank " << r;
      }
    }
    std::string text;
    EXPECT_EQ(g.asyncError(0, &text), arfuseMismatch) << text;
    for (cudaGraphExec_t e : execs) cudaGraphExecDestroy(e);
  }
}

}  // namespace
}  // namespace arfuse
