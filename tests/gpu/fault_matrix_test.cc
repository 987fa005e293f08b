// The fault matrix of the error-path contract (docs/troubleshooting.md, "after a failure"):
// {skipped call, divergent call, two streams, late rank} x {eager, CUDA-graph replay} x {every path}.
// For each cell: every rank gets an error within timeout + slack; no output element of a call that
// failed looks valid (NaN on the device, or untouched with an error returned by the host); every
// later call -- eager or replayed -- fails fast and writes nothing valid-looking; the flight
// recorder shows the failed and refused calls; and a re-created group computes correctly.
// In gpu_test (Gpu_*) the ranks are virtual, on GPU 0; in multigpu_test (Gpu2_*) rank r runs on GPU
// r % (number of GPUs).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "arfuse/arfuse.h"
#include "gpu_fixture.h"
#include "harness/numeric.h"

namespace arfuse {
namespace {

#if ARFUSE_TEST_MIN_GPUS >= 2
#define MATRIX_SUITE Gpu2_FaultMatrix
#else
#define MATRIX_SUITE Gpu_FaultMatrix
#endif

using gpufixture::Clock;
using gpufixture::secondsSince;
int deviceOf(int r) { return gpufixture::rankDevice(r); }

constexpr int kHidden = 1024;
constexpr int kMaxTok = 16;
constexpr uint16_t kPoison = 0x3F80;  // bf16 1.0: a finite value no correct output of these inputs has

bool isNan(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0; }

// n ranks of fused bf16 calls (x, residual_in -> norm_out, residual_out; separate buffers), one
// non-blocking stream each.
struct Fused : gpufixture::RankGroup {
  int algo, timeoutMs;
  std::vector<uint16_t*> x, res, w, norm, resOut;
  std::vector<std::vector<uint16_t>> hx, hres, hw;
  std::mt19937 rng;

  Fused(int nranks, int algo_, int timeout)
      : RankGroup(nranks), algo(algo_), timeoutMs(timeout), rng(77 + nranks * 3 + algo_) {
    x.resize(n), res.resize(n), w.resize(n), norm.resize(n), resOut.resize(n);
    hx.resize(n), hres.resize(n), hw.resize(n);
    create();
    for (int r = 0; r < n; ++r) {
      cudaSetDevice(deviceOf(r));
      for (uint16_t** p : {&x[r], &res[r], &norm[r], &resOut[r]}) cudaMalloc(p, kMaxTok * kHidden * 2);
      cudaMalloc(&w[r], kHidden * 2);
    }
    fresh();
  }
  // (Again after destroy(): RankGroup's, which waits for the streams and destroys the communicators.)
  void create() {
    RankGroup::create(gpufixture::testConfig(kMaxTok, kHidden, algo, timeoutMs, ARFUSE_DTYPE_BIT(arfuseBfloat16)));
  }
  ~Fused() {
    destroy();
    for (int r = 0; r < n; ++r)
      for (uint16_t* p : {x[r], res[r], w[r], norm[r], resOut[r]}) cudaFree(p);
  }
  // Fresh random inputs (weight and residual equal on every rank, as the contract requires), and
  // poisoned outputs; all copies finish before the next call.
  void fresh() {
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<uint16_t> wv(kHidden), rv(kMaxTok * kHidden);
    for (auto& v : wv) v = numeric::floatToBf16(0.5f + 0.5f * u(rng));
    for (auto& v : rv) v = numeric::floatToBf16(u(rng));
    std::vector<uint16_t> poison(kMaxTok * kHidden, kPoison);
    for (int r = 0; r < n; ++r) {
      hx[r].resize(kMaxTok * kHidden);
      for (auto& v : hx[r]) v = numeric::floatToBf16(u(rng));
      hw[r] = wv;
      hres[r] = rv;
      cudaSetDevice(deviceOf(r));
      cudaMemcpy(x[r], hx[r].data(), hx[r].size() * 2, cudaMemcpyHostToDevice);
      cudaMemcpy(res[r], rv.data(), rv.size() * 2, cudaMemcpyHostToDevice);
      cudaMemcpy(w[r], wv.data(), wv.size() * 2, cudaMemcpyHostToDevice);
      cudaMemcpy(norm[r], poison.data(), poison.size() * 2, cudaMemcpyHostToDevice);
      cudaMemcpy(resOut[r], poison.data(), poison.size() * 2, cudaMemcpyHostToDevice);
      cudaDeviceSynchronize();
    }
  }
  arfuseResult_t call(int r, int tokens = 4, cudaStream_t s = nullptr, uint16_t* normOut = nullptr,
                      uint16_t* residualOut = nullptr) {
    return arfuseAllReduceAddRmsNorm(x[r], res[r], w[r], 1e-6f, normOut ? normOut : norm[r],
                                     residualOut ? residualOut : resOut[r], tokens, kHidden, arfuseBfloat16, comms[r],
                                     s ? s : streams[r]);
  }
  std::vector<uint16_t> read(const uint16_t* p, int tokens = kMaxTok) {
    std::vector<uint16_t> v(static_cast<size_t>(tokens) * kHidden);
    cudaMemcpy(v.data(), p, v.size() * 2, cudaMemcpyDeviceToHost);
    return v;
  }
  // Every element of the first `tokens` rows of both outputs of rank r: NaN / the poison.
  int countNot(int r, int tokens, bool nan) {
    int bad = 0;
    for (const uint16_t* p : {norm[r], resOut[r]})
      for (uint16_t b : read(p, tokens)) bad += nan ? !isNan(b) : b != kPoison;
    return bad;
  }
  // Residual and norm of rank r against fp64 (bf16 tolerance), for `tokens` rows.
  double maxRelError(int r, int tokens) {
    const std::vector<uint16_t> gotN = read(norm[r], tokens), gotR = read(resOut[r], tokens);
    double worst = 0;
    for (int t = 0; t < tokens; ++t) {
      std::vector<double> sum(kHidden);
      double sq = 0;
      for (int k = 0; k < kHidden; ++k) {
        double s = numeric::bf16ToFloat(hres[r][t * kHidden + k]);
        for (int q = 0; q < n; ++q) s += numeric::bf16ToFloat(hx[q][t * kHidden + k]);
        sum[k] = s;
        sq += s * s;
      }
      const double inv = 1.0 / std::sqrt(sq / kHidden + 1e-6);
      for (int k = 0; k < kHidden; ++k) {
        const double wantR = sum[k], wantN = sum[k] * inv * numeric::bf16ToFloat(hw[r][k]);
        const double gr = numeric::bf16ToFloat(gotR[t * kHidden + k]), gn = numeric::bf16ToFloat(gotN[t * kHidden + k]);
        if (!std::isfinite(gr) || !std::isfinite(gn)) return INFINITY;
        worst = std::max(worst, std::fabs(gr - wantR) / (std::fabs(wantR) + 0.05));
        worst = std::max(worst, std::fabs(gn - wantN) / (std::fabs(wantN) + 0.05));
      }
    }
    return worst;
  }
  arfuseResult_t asyncError(int r, std::string* text) {
    arfuseResult_t e = arfuseSuccess;
    EXPECT_EQ(arfuseCommGetAsyncError(comms[r], &e), arfuseSuccess);
    *text = arfuseCommGetLastError(comms[r]);
    return e;
  }
  std::string dump(int r) {
    char path[] = "/tmp/arfuse-matrix-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return "";
    close(fd);
    std::string text;
    if (arfuseCommDumpState(comms[r], path) == arfuseSuccess)
      if (FILE* f = std::fopen(path, "r")) {
        char buf[4096];
        size_t k;
        while ((k = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, k);
        std::fclose(f);
      }
    std::remove(path);
    return text;
  }
  cudaGraphExec_t capture(int r, int tokens = 4) {
    cudaSetDevice(deviceOf(r));
    cudaGraph_t graph;
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeThreadLocal), cudaSuccess);
    EXPECT_EQ(call(r, tokens), arfuseSuccess) << arfuseCommGetLastError(comms[r]);
    EXPECT_EQ(cudaStreamEndCapture(streams[r], &graph), cudaSuccess);
    EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    cudaGraphDestroy(graph);
    return exec;
  }
  void replay(int r, cudaGraphExec_t e) {
    cudaSetDevice(deviceOf(r));
    ASSERT_EQ(cudaGraphLaunch(e, streams[r]), cudaSuccess);
  }
  void sync(int r) {
    cudaSetDevice(deviceOf(r));
    ASSERT_EQ(cudaStreamSynchronize(streams[r]), cudaSuccess);
  }
};

const int kPaths[] = {arfuseAlgoLowLatency, arfuseAlgoOneShot, arfuseAlgoTwoShot, arfuseAlgoHostStaged};
std::string pathName(int a) { return arfuseAlgoName(arfuseAlgo_t(a)); }

class MATRIX_SUITE : public ::testing::TestWithParam<int> {};

// The issue-15 scenario: one graph per rank, rank 1 skips a replay. Rank 0 times out naming rank 1;
// then every later replay of every rank (fresh inputs each time) finishes fast and leaves every output
// element NaN; the dump shows the failed call, the refused ones and the error; eager calls are refused
// by the host with outputs untouched; a re-created group computes correctly.
TEST_P(MATRIX_SUITE, SkippedReplayThenEveryLaterCallFailsFast) {
  const int algo = GetParam();
  Fused g(2, algo, /*timeoutMs=*/300);
  ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
  std::vector<cudaGraphExec_t> ex = {g.capture(0), g.capture(1)};
  for (int rep = 0; rep < 3; ++rep) {  // healthy replays first
    g.fresh();
    for (int r = 0; r < 2; ++r) g.replay(r, ex[r]);
    for (int r = 0; r < 2; ++r) g.sync(r);
    for (int r = 0; r < 2; ++r) EXPECT_LT(g.maxRelError(r, 4), 2e-2) << pathName(algo) << " rank " << r;
  }
  g.fresh();
  const auto t0 = Clock::now();
  g.replay(0, ex[0]);  // rank 1 skips this one
  g.sync(0);
  const double waited = secondsSince(t0);
  EXPECT_GE(waited, 0.29);
  EXPECT_LT(waited, 0.3 + 0.5) << "timeout + one poll interval (and scheduling slack)";
  EXPECT_EQ(g.countNot(0, 4, /*nan=*/true), 0)
      << "the failed call's outputs must all be NaN (" << pathName(algo) << ")";
  std::string text;
  EXPECT_EQ(g.asyncError(0, &text), arfusePeerTimeout) << text;
  EXPECT_NE(text.find("for rank 1"), std::string::npos) << text;
  for (int rep = 0; rep < 8; ++rep) {
    g.fresh();
    const auto t1 = Clock::now();
    for (int r = 0; r < 2; ++r) g.replay(r, ex[r]);
    for (int r = 0; r < 2; ++r) g.sync(r);
    EXPECT_LT(secondsSince(t1), 0.1) << "a replay of an aborted group fails fast";
    for (int r = 0; r < 2; ++r)
      EXPECT_EQ(g.countNot(r, 4, true), 0) << pathName(algo) << " replay " << rep << " rank " << r
                                           << ": an aborted group must not write valid-looking outputs";
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(g.asyncError(r, &text), arfuseSuccess) << "rank " << r;
    const std::string d = g.dump(r);
    EXPECT_NE(d.find("status=refused"), std::string::npos) << d;
    if (r == 0) {
      EXPECT_NE(d.find("status=failed"), std::string::npos) << d;
      EXPECT_NE(d.find("code=peer_timeout"), std::string::npos) << d;
      EXPECT_NE(d.find("peer=1"), std::string::npos) << d;
    }
  }
  // Eager calls: refused by the host before anything is launched; outputs untouched.
  g.fresh();
  const auto t2 = Clock::now();
  for (int r = 0; r < 2; ++r) EXPECT_NE(g.call(r), arfuseSuccess);
  EXPECT_LT(secondsSince(t2), 0.05);
  for (int r = 0; r < 2; ++r) g.sync(r);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(g.countNot(r, kMaxTok, /*nan=*/false), 0) << "outputs must be untouched";
  for (auto e : ex) cudaGraphExecDestroy(e);
  // Recovery: destroy and re-create the group.
  g.destroy();
  g.create();
  ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
  g.fresh();
  for (int r = 0; r < 2; ++r) ASSERT_EQ(g.call(r), arfuseSuccess) << arfuseCommGetLastError(g.comms[r]);
  for (int r = 0; r < 2; ++r) g.sync(r);
  for (int r = 0; r < 2; ++r) EXPECT_LT(g.maxRelError(r, 4), 2e-2) << "re-created group, rank " << r;
}

// A divergent call (rank 1 calls with fewer tokens), eager and in a graph: every rank reports the
// mismatch quickly, and no output element of either rank's divergent call looks valid.
TEST_P(MATRIX_SUITE, DivergentCallWritesNothingValid) {
  const int algo = GetParam();
  for (bool graph : {false, true}) {
    Fused g(3, algo, /*timeoutMs=*/5000);
    ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
    const int tokens[3] = {4, 4, 2};
    const auto t0 = Clock::now();
    std::vector<cudaGraphExec_t> ex(3, nullptr);
    if (graph) {
      for (int r = 0; r < 3; ++r) {
        cudaSetDevice(deviceOf(r));
        cudaGraph_t gr;
        ASSERT_EQ(cudaStreamBeginCapture(g.streams[r], cudaStreamCaptureModeThreadLocal), cudaSuccess);
        ASSERT_EQ(g.call(r, tokens[r]), arfuseSuccess);
        ASSERT_EQ(cudaStreamEndCapture(g.streams[r], &gr), cudaSuccess);
        ASSERT_EQ(cudaGraphInstantiate(&ex[r], gr, 0), cudaSuccess);
        cudaGraphDestroy(gr);
      }
      for (int r = 0; r < 3; ++r) g.replay(r, ex[r]);
    } else {
      for (int r = 0; r < 3; ++r) ASSERT_EQ(g.call(r, tokens[r]), arfuseSuccess) << arfuseGetLastError();
    }
    for (int r = 0; r < 3; ++r) g.sync(r);
    EXPECT_LT(secondsSince(t0), 2.5) << "a mismatch must not wait for the 5 s timeout";
    for (int r = 0; r < 3; ++r) {
      std::string text;
      EXPECT_EQ(g.asyncError(r, &text), arfuseMismatch) << pathName(algo) << " rank " << r << ": " << text;
      EXPECT_EQ(g.countNot(r, tokens[r], true), 0)
          << pathName(algo) << (graph ? " graph" : " eager") << " rank " << r << ": outputs of a divergent call";
    }
    for (auto e : ex)
      if (e) cudaGraphExecDestroy(e);
  }
}

// Two calls of rank 0 on two streams at once (rank 1 never calls): detected on the device, and no
// output of either call looks valid.
TEST_P(MATRIX_SUITE, TwoStreamsAtOnceWriteNothingValid) {
  const int algo = GetParam();
  Fused g(2, algo, /*timeoutMs=*/3000);
  ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
  cudaStream_t other;
  uint16_t *norm2, *res2;
  cudaSetDevice(deviceOf(0));
  cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
  cudaMalloc(&norm2, kMaxTok * kHidden * 2);
  cudaMalloc(&res2, kMaxTok * kHidden * 2);
  std::vector<uint16_t> poison(kMaxTok * kHidden, kPoison);
  cudaMemcpy(norm2, poison.data(), poison.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(res2, poison.data(), poison.size() * 2, cudaMemcpyHostToDevice);
  const auto t0 = Clock::now();
  ASSERT_EQ(g.call(0), arfuseSuccess);  // waits for rank 1
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(g.call(0, 4, other, norm2, res2), arfuseSuccess);
  g.sync(0);
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  EXPECT_LT(secondsSince(t0), 2.5) << "detected at once, not by the timeout";
  std::string text;
  EXPECT_EQ(g.asyncError(0, &text), arfuseInvalidUsage) << text;
  EXPECT_EQ(g.countNot(0, 4, true), 0) << "first call's outputs";
  int bad = 0;
  for (const uint16_t* p : {norm2, res2})
    for (uint16_t b : g.read(p, 4)) bad += !isNan(b);
  EXPECT_EQ(bad, 0) << "second call's outputs";
  cudaFree(norm2);
  cudaFree(res2);
  cudaStreamDestroy(other);
}

// A rank 300 ms late against a 3 s timeout, in a graph replay: correct results, no error.
TEST_P(MATRIX_SUITE, LateRankInAGraphIsFine) {
  const int algo = GetParam();
  Fused g(3, algo, /*timeoutMs=*/3000);
  ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
  std::vector<cudaGraphExec_t> ex = {g.capture(0), g.capture(1), g.capture(2)};
  g.fresh();
  g.replay(0, ex[0]);
  g.replay(1, ex[1]);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  g.replay(2, ex[2]);
  for (int r = 0; r < 3; ++r) g.sync(r);
  for (int r = 0; r < 3; ++r) {
    std::string text;
    EXPECT_EQ(g.asyncError(r, &text), arfuseSuccess) << text;
    EXPECT_LT(g.maxRelError(r, 4), 2e-2) << pathName(algo) << " rank " << r;
  }
  for (auto e : ex) cudaGraphExecDestroy(e);
}

INSTANTIATE_TEST_SUITE_P(Paths, MATRIX_SUITE, ::testing::ValuesIn(kPaths),
                         [](const ::testing::TestParamInfo<int>& i) { return pathName(i.param); });

}  // namespace
}  // namespace arfuse
