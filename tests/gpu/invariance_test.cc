// Batch invariance (include/arfuse/arfuse.h "Numerics"): a row's outputs are the same bits whatever
// the path, the launch geometry (row split over a cluster or not, vectors per thread) and the
// number of tokens in the call -- they depend only on the row's inputs and the world size. Checked
// bitwise on every rank, against an fp64 reference too. The single-GPU kernel (arfuseAddRmsNorm)
// is checked the same way across token counts. In multigpu_test the NCCL path joins in with
// arfuseConfig_t.deterministic = 1.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "gpu_fixture.h"
#include "harness/numeric.h"

namespace arfuse {
namespace {

#if ARFUSE_TEST_MIN_GPUS >= 2
#define INVARIANCE_SUITE Gpu2_BatchInvariance
#else
#define INVARIANCE_SUITE Gpu_BatchInvariance
#endif

constexpr int kRows = 64;
constexpr float kEps = 1e-6f;

// Fixed inputs of kRows rows for n ranks (residual and weight equal on every rank).
struct Inputs {
  int n, hidden;
  std::vector<std::vector<uint16_t>> x;
  std::vector<uint16_t> res, w;
  Inputs(int nranks, int h, uint32_t seed) : n(nranks), hidden(h), x(nranks) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    for (auto& v : x) {
      v.resize(static_cast<size_t>(kRows) * h);
      for (auto& e : v) e = numeric::floatToBf16(u(rng));
    }
    res.resize(static_cast<size_t>(kRows) * h);
    for (auto& e : res) e = numeric::floatToBf16(u(rng));
    w.resize(h);
    for (auto& e : w) e = numeric::floatToBf16(0.25f + 0.5f * std::fabs(u(rng)));
  }
};

// Runs rows [first, first + tokens) through a group forced to `algo` and returns every rank's
// (norm_out, residual_out) of those rows. Empty when the path refuses the call (e.g. low-latency
// beyond its size).
struct Result {
  bool ran = false;
  std::string why;
  std::vector<std::vector<uint16_t>> norm, res;
};
Result run(const Inputs& in, int algo, int first, int tokens, bool deterministic) {
  Result out;
  const int n = in.n, h = in.hidden;
  gpufixture::RankGroup g(n);
  arfuseConfig_t cfg = gpufixture::testConfig(kRows, h, algo, -1, ARFUSE_DTYPE_BIT(arfuseBfloat16));
  cfg.deterministic = deterministic ? 1 : 0;
  if (g.create(cfg) != arfuseSuccess) {
    out.why = arfuseGetLastError();
    return out;
  }
  const std::vector<arfuseComm_t>& comms = g.comms;
  const std::vector<int>& devs = g.devices;
  const std::vector<cudaStream_t>& st = g.streams;
  arfusePlan_t plan;
  if (arfuseCommQueryPlan(comms[0], arfuseOpAllReduceAddRmsNorm, tokens, h, arfuseBfloat16, &plan) != arfuseSuccess) {
    out.why = arfuseCommGetLastError(comms[0]);
    return out;
  }
  const size_t bytes = static_cast<size_t>(tokens) * h * 2, off = static_cast<size_t>(first) * h;
  std::vector<uint16_t*> x(n), res(n), w(n), norm(n), ro(n);
  std::vector<uint16_t> poison(static_cast<size_t>(tokens) * h, 0xFFFF);
  for (int r = 0; r < n; ++r) {
    cudaSetDevice(devs[r]);
    for (uint16_t** p : {&x[r], &res[r], &norm[r], &ro[r]}) cudaMalloc(p, bytes);
    cudaMalloc(&w[r], h * 2);
    cudaMemcpy(x[r], in.x[r].data() + off, bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(res[r], in.res.data() + off, bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(w[r], in.w.data(), h * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(norm[r], poison.data(), bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(ro[r], poison.data(), bytes, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
  }
  arfuseGroupStart();
  bool ok = true;
  for (int r = 0; r < n; ++r)
    ok = ok && arfuseAllReduceAddRmsNorm(x[r], res[r], w[r], kEps, norm[r], ro[r], tokens, h, arfuseBfloat16, comms[r],
                                         st[r]) == arfuseSuccess;
  ok = arfuseGroupEnd() == arfuseSuccess && ok;
  out.norm.resize(n);
  out.res.resize(n);
  for (int r = 0; r < n; ++r) {
    cudaSetDevice(devs[r]);
    cudaStreamSynchronize(st[r]);
    arfuseResult_t e = arfuseSuccess;
    arfuseCommGetAsyncError(comms[r], &e);
    ok = ok && e == arfuseSuccess;
    out.norm[r].resize(static_cast<size_t>(tokens) * h);
    out.res[r].resize(static_cast<size_t>(tokens) * h);
    cudaMemcpy(out.norm[r].data(), norm[r], bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(out.res[r].data(), ro[r], bytes, cudaMemcpyDeviceToHost);
    for (uint16_t* p : {x[r], res[r], w[r], norm[r], ro[r]}) cudaFree(p);
  }
  out.ran = ok;
  if (!ok) out.why = "a call failed";
  return out;
}

// fp64 reference of one row: relative error of (norm, residual) against it.
double rowError(const Inputs& in, int row, const uint16_t* norm, const uint16_t* res) {
  const int h = in.hidden;
  std::vector<double> s(h);
  double sq = 0;
  for (int k = 0; k < h; ++k) {
    double v = numeric::bf16ToFloat(in.res[static_cast<size_t>(row) * h + k]);
    for (int q = 0; q < in.n; ++q) v += numeric::bf16ToFloat(in.x[q][static_cast<size_t>(row) * h + k]);
    s[k] = v;
    sq += v * v;
  }
  const double inv = 1 / std::sqrt(sq / h + kEps);
  double num = 0, den = 0;
  for (int k = 0; k < h; ++k) {
    const double wn = s[k] * inv * numeric::bf16ToFloat(in.w[k]);
    const double dn = numeric::bf16ToFloat(norm[k]) - wn, dr = numeric::bf16ToFloat(res[k]) - s[k];
    num += dn * dn + dr * dr;
    den += wn * wn + s[k] * s[k];
  }
  return std::sqrt(num / den);
}

struct World {
  int n, hidden;
};
class INVARIANCE_SUITE : public ::testing::TestWithParam<World> {};

TEST_P(INVARIANCE_SUITE, RowBitsIgnorePathGeometryAndTokens) {
  const World wd = GetParam();
  const Inputs in(wd.n, wd.hidden, 1000 + wd.n * 31 + wd.hidden);
  // The reference: one-shot over all kRows rows.
  const Result ref = run(in, arfuseAlgoOneShot, 0, kRows, false);
  ASSERT_TRUE(ref.ran) << ref.why;
  for (int r = 0; r < wd.n; ++r) {
    ASSERT_EQ(ref.norm[r], ref.norm[0]) << "ranks differ";
    ASSERT_EQ(ref.res[r], ref.res[0]) << "ranks differ";
  }
  for (int row = 0; row < kRows; row += 7)
    EXPECT_LT(rowError(in, row, ref.norm[0].data() + static_cast<size_t>(row) * wd.hidden,
                       ref.res[0].data() + static_cast<size_t>(row) * wd.hidden),
              1e-2);
  std::vector<int> paths = {arfuseAlgoLowLatency, arfuseAlgoOneShot, arfuseAlgoTwoShot, arfuseAlgoHostStaged};
#if ARFUSE_TEST_MIN_GPUS >= 2
  paths.push_back(arfuseAlgoNccl);  // with deterministic = 1
#endif
  int compared = 0;
  int ngpu = 1;
  cudaGetDeviceCount(&ngpu);
  for (int algo : paths) {
    if (algo == arfuseAlgoNccl && wd.n > ngpu) continue;  // NCCL needs one GPU per rank
    for (int tokens : {1, 2, 3, 5, 16, 33, 64}) {
      const int first = (tokens * 13) % (kRows - tokens + 1);  // rows at other positions of the call too
      const Result got = run(in, algo, first, tokens, algo == arfuseAlgoNccl);
      if (!got.ran) {
        EXPECT_TRUE(algo == arfuseAlgoLowLatency)
            << arfuseAlgoName(arfuseAlgo_t(algo)) << " tokens=" << tokens << ": " << got.why;
        continue;  // low-latency refuses calls beyond its size: the reason is the plan's
      }
      for (int r = 0; r < wd.n; ++r) {
        const size_t at = static_cast<size_t>(first) * wd.hidden, len = static_cast<size_t>(tokens) * wd.hidden;
        EXPECT_EQ(0, std::memcmp(got.norm[r].data(), ref.norm[0].data() + at, len * 2))
            << arfuseAlgoName(arfuseAlgo_t(algo)) << " tokens=" << tokens << " rank " << r << ": norm_out bits differ";
        EXPECT_EQ(0, std::memcmp(got.res[r].data(), ref.res[0].data() + at, len * 2))
            << arfuseAlgoName(arfuseAlgo_t(algo)) << " tokens=" << tokens << " rank " << r
            << ": residual_out bits differ";
      }
      ++compared;
    }
  }
  EXPECT_GE(compared, 3 * 7);
}

INSTANTIATE_TEST_SUITE_P(Worlds, INVARIANCE_SUITE,
                         ::testing::Values(World{2, 7168}, World{3, 4096}, World{4, 8192}, World{4, 1024}),
                         [](const ::testing::TestParamInfo<World>& i) {
                           return std::to_string(i.param.n) + "ranks_h" + std::to_string(i.param.hidden);
                         });

#if ARFUSE_TEST_MIN_GPUS < 2
// The single-GPU kernel: a row's bits do not depend on the tokens in the call (its geometry changes
// with the token count: vectors per thread, threads, blocks).
TEST(Gpu_BatchInvariance, AddRmsNormRowBitsIgnoreTokens) {
  const int h = 7168;
  const Inputs in(1, h, 4242);
  std::vector<uint16_t> ref;
  for (int tokens : {64, 1, 2, 7, 16, 40}) {
    const size_t bytes = static_cast<size_t>(tokens) * h * 2;
    uint16_t *x, *res, *w, *norm, *ro;
    for (uint16_t** p : {&x, &res, &norm, &ro}) cudaMalloc(p, bytes);
    cudaMalloc(&w, h * 2);
    cudaMemcpy(x, in.x[0].data(), bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(res, in.res.data(), bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(w, in.w.data(), h * 2, cudaMemcpyHostToDevice);
    cudaMemset(norm, 0xFF, bytes);
    ASSERT_EQ(arfuseAddRmsNorm(x, res, w, kEps, norm, ro, tokens, h, arfuseBfloat16, nullptr), arfuseSuccess)
        << arfuseGetLastError();
    std::vector<uint16_t> got(static_cast<size_t>(tokens) * h), gotRes(got.size());
    cudaMemcpy(got.data(), norm, bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(gotRes.data(), ro, bytes, cudaMemcpyDeviceToHost);
    EXPECT_LT(rowError(in, 0, got.data(), gotRes.data()), 1e-2) << "tokens=" << tokens;
    if (ref.empty()) {
      ref = got;
    } else {
      EXPECT_EQ(0, std::memcmp(got.data(), ref.data(), bytes)) << "tokens=" << tokens;
    }
    for (uint16_t* p : {x, res, w, norm, ro}) cudaFree(p);
  }
}
#endif

}  // namespace
}  // namespace arfuse
