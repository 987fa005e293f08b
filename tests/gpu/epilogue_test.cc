// The extended epilogue (arfuseAllReduceEpilogue) on every path the plan can select, virtual ranks
// on GPU 0: first layer (no residual_in), (1 + w) weights, optional outputs, FP8 static / per-token
// and NVFP4 in both scale layouts. The quantised bytes and scales are compared bit for bit with the
// CPU reference of the format (src/quant/reference.h) applied to the kernel's own norm_out (the
// norm itself is checked against fp64 like every other test); outputs are bitwise equal across
// ranks; residual_out is exact against the fp32 rank-order sum.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "gpu_fixture.h"
#include "harness/numeric.h"
#include "quant/formats.h"
#include "quant/reference.h"

namespace arfuse {
namespace {

struct Dev {
  void* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t bytes, int fill = 0xFF, int device = 0) : n(bytes) {
    cudaSetDevice(device);
    cudaMalloc(&p, bytes ? bytes : 16);
    cudaMemset(p, fill, bytes ? bytes : 16);
  }
  ~Dev() { cudaFree(p); }
  std::vector<uint8_t> get() const {
    std::vector<uint8_t> h(n);
    cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost);
    return h;
  }
};

struct Case {
  int algo;   // forced path (-1 auto, arfuseAlgoLocal for one rank)
  int ranks;  // ranks on GPU 0 (virtual), or one per GPU when distinct
  bool distinct;
  arfuseDataType_t dtype;
  int tokens, hidden;
  int quant;
  int layout;
  bool firstLayer, plusOne, writeResidual, writeNorm;
};

std::string name(const Case& c) {
  return std::string(c.algo < 0 ? "auto" : arfuseAlgoName(arfuseAlgo_t(c.algo))) + " n=" + std::to_string(c.ranks) +
         (c.distinct ? " GPUs" : " virtual") + " " + arfuseDataTypeName(c.dtype) + " " + std::to_string(c.tokens) +
         "x" + std::to_string(c.hidden) + " quant=" + std::to_string(c.quant) + " layout=" + std::to_string(c.layout) +
         (c.firstLayer ? " first-layer" : "") + (c.plusOne ? " 1+w" : "");
}

// Runs one case; returns rank 0's quantised bytes (empty on failure).
std::vector<uint8_t> runCase(const Case& c) {
  SCOPED_TRACE(name(c));
  const int n = c.ranks;
  std::vector<int> devs(n, 0);
  if (c.distinct)
    for (int r = 0; r < n; ++r) devs[r] = r;
  const size_t count = static_cast<size_t>(c.tokens) * c.hidden, es = numeric::elemSize(c.dtype);
  std::mt19937_64 rng(1234 + c.quant * 7 + c.tokens);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto fresh = [&](size_t k, float scale) {
    std::vector<uint8_t> h(k * es);
    for (size_t i = 0; i < k; ++i) {
      float v = u(rng) * scale;
      if (v == 0.f) v = 0.25f * scale;
      numeric::store(h.data(), i, v, c.dtype);
    }
    return h;
  };
  std::vector<std::vector<uint8_t>> xs(n);
  for (int r = 0; r < n; ++r) xs[r] = fresh(count, 1.f);
  const std::vector<uint8_t> res = fresh(count, 2.f), w = fresh(c.hidden, 1.f);
  const float scale = c.quant == arfuseQuantFp8Static ? 0.02f : 3.5f;  // static FP8 scale / NVFP4 global scale
  std::vector<std::unique_ptr<Dev>> x, rin, wt, rout, nout, qout, sout, scaleIn;
  const size_t qBytes = c.quant == arfuseQuantNvfp4 ? count / 2 : count;
  const size_t sBytes = c.quant == arfuseQuantFp8PerToken ? c.tokens * sizeof(float)
                        : c.quant == arfuseQuantNvfp4     ? quant::sfBytes(c.layout, c.tokens, c.hidden / 16)
                                                          : 16;
  for (int r = 0; r < n; ++r) {
    const int d = devs[r];
    x.emplace_back(new Dev(count * es, 0xFF, d));
    rin.emplace_back(new Dev(count * es, 0xFF, d));
    wt.emplace_back(new Dev(c.hidden * es, 0xFF, d));
    rout.emplace_back(new Dev(count * es, 0xFF, d));
    nout.emplace_back(new Dev(count * es, 0xFF, d));
    qout.emplace_back(new Dev(qBytes, 0xFF, d));
    sout.emplace_back(new Dev(sBytes, 0x5A, d));  // poison the padding too: the kernel must zero it
    scaleIn.emplace_back(new Dev(sizeof(float), 0xFF, d));
    cudaMemcpy(scaleIn[r]->p, &scale, sizeof scale, cudaMemcpyHostToDevice);
    cudaMemcpy(x[r]->p, xs[r].data(), count * es, cudaMemcpyHostToDevice);
    cudaMemcpy(rin[r]->p, res.data(), count * es, cudaMemcpyHostToDevice);
    cudaMemcpy(wt[r]->p, w.data(), c.hidden * es, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
  }
  // Declared after the buffers, so that it waits for its streams and goes before they are freed.
  gpufixture::RankGroup g(devs);
  EXPECT_EQ(g.create(gpufixture::testConfig(c.tokens, c.hidden, c.algo == arfuseAlgoLocal ? -1 : c.algo, 20000)),
            arfuseSuccess)
      << arfuseGetLastError();
  if (::testing::Test::HasFailure()) return {};
  const std::vector<arfuseComm_t>& comms = g.comms;
  const std::vector<cudaStream_t>& streams = g.streams;
  // One thread drives every rank: on the NCCL path the calls must form one group (arfuse.h).
  arfuseGroupStart();
  for (int r = 0; r < n; ++r) {
    arfuseEpilogue_t e = ARFUSE_EPILOGUE_INITIALIZER;
    e.residualIn = c.firstLayer ? nullptr : rin[r]->p;
    e.residualOut = c.writeResidual ? rout[r]->p : nullptr;
    e.normOut = c.writeNorm ? nout[r]->p : nullptr;
    e.weightPlusOne = c.plusOne;
    e.quant = c.quant;
    e.quantOut = c.quant ? qout[r]->p : nullptr;
    e.scaleOut = (c.quant == arfuseQuantFp8PerToken || c.quant == arfuseQuantNvfp4) ? sout[r]->p : nullptr;
    e.scaleIn = static_cast<const float*>(scaleIn[r]->p);
    e.scaleLayout = c.layout;
    EXPECT_EQ(arfuseAllReduceEpilogue(x[r]->p, wt[r]->p, 1e-6f, &e, c.tokens, c.hidden, c.dtype, comms[r], streams[r]),
              arfuseSuccess)
        << arfuseCommGetLastError(comms[r]);
  }
  EXPECT_EQ(arfuseGroupEnd(), arfuseSuccess) << arfuseGetLastError();
  for (int r = 0; r < n; ++r) EXPECT_EQ(cudaStreamSynchronize(streams[r]), cudaSuccess);
  arfuseResult_t async = arfuseSuccess;
  arfuseCommGetAsyncError(comms[0], &async);
  EXPECT_EQ(async, arfuseSuccess) << arfuseCommGetLastError(comms[0]);
  if (::testing::Test::HasFailure()) return {};

  // residual r = round(fp32 rank-order sum [+ residual_in]): exact.
  std::vector<float> rr(count);
  for (size_t i = 0; i < count; ++i) {
    float acc = 0.f;
    for (int s = 0; s < n; ++s) acc += numeric::load(xs[s].data(), i, c.dtype);
    if (!c.firstLayer) acc += numeric::load(res.data(), i, c.dtype);
    rr[i] = numeric::round(acc, c.dtype);
  }
  const std::vector<uint8_t> q0 = qout[0]->get(), s0 = sout[0]->get(), n0 = nout[0]->get(), r0 = rout[0]->get();
  for (int r = 1; r < n; ++r) {  // bitwise equal across ranks
    if (c.writeNorm) EXPECT_EQ(nout[r]->get(), n0) << "norm_out differs on rank " << r;
    if (c.writeResidual) EXPECT_EQ(rout[r]->get(), r0) << "residual_out differs on rank " << r;
    if (c.quant) EXPECT_EQ(qout[r]->get(), q0) << "quant_out differs on rank " << r;
  }
  // arfuse's own paths sum in fp32 in rank order, so residual_out is exact; NCCL rounds its partial
  // sums to the dtype on the way (its order is its own), so there it is held to the dtype's tolerance.
  arfusePlan_t plan;
  EXPECT_EQ(arfuseCommQueryPlan(comms[0], arfuseOpAllReduceAddRmsNorm, c.tokens, c.hidden, c.dtype, &plan),
            arfuseSuccess);
  const bool exactSum = plan.algo != arfuseAlgoNccl;
  if (c.writeResidual) {
    size_t wrongR = 0;
    double e2 = 0, r2 = 0;
    for (size_t i = 0; i < count; ++i) {
      const double got = numeric::load(r0.data(), i, c.dtype);
      double want = 0;
      for (int s = 0; s < n; ++s) want += numeric::load(xs[s].data(), i, c.dtype);
      if (!c.firstLayer) want += numeric::load(res.data(), i, c.dtype);
      wrongR += got != rr[i];
      e2 += (got - want) * (got - want);
      r2 += want * want;
    }
    if (exactSum)
      EXPECT_EQ(wrongR, 0u) << "residual_out elements differing from the fp32 rank-order sum";
    else
      EXPECT_LE(std::sqrt(e2 / r2), numeric::tolerance(c.dtype)) << "residual_out (NCCL sum) against fp64";
  }
  if (!c.writeNorm) return q0;
  // norm against fp64; then the quantised output bit for bit from the kernel's own norm_out.
  double err = 0, ref = 0;
  std::vector<float> nv(count);
  for (int t = 0; t < c.tokens; ++t) {
    double sq = 0;
    for (int i = 0; i < c.hidden; ++i) sq += double(rr[size_t(t) * c.hidden + i]) * rr[size_t(t) * c.hidden + i];
    const double inv = 1.0 / std::sqrt(sq / c.hidden + 1e-6);
    for (int i = 0; i < c.hidden; ++i) {
      const size_t j = size_t(t) * c.hidden + i;
      const double wv = numeric::load(w.data(), i, c.dtype) + (c.plusOne ? 1.0 : 0.0);
      const double want = rr[j] * inv * wv;
      nv[j] = numeric::load(n0.data(), j, c.dtype);
      err += (nv[j] - want) * (nv[j] - want);
      ref += want * want;
    }
  }
  EXPECT_LE(std::sqrt(err / ref), numeric::tolerance(c.dtype)) << "norm_out against fp64";
  if (c.quant == arfuseQuantNone) return q0;
  std::vector<uint8_t> wantQ(qBytes), wantS(sBytes, 0);
  for (int t = 0; t < c.tokens; ++t) {
    const float* v = nv.data() + size_t(t) * c.hidden;
    if (c.quant == arfuseQuantFp8Static) {
      quant::refFp8StaticRow(v, c.hidden, scale, wantQ.data() + size_t(t) * c.hidden);
    } else if (c.quant == arfuseQuantFp8PerToken) {
      const float s = quant::refFp8PerTokenRow(v, c.hidden, wantQ.data() + size_t(t) * c.hidden);
      std::memcpy(wantS.data() + t * sizeof(float), &s, sizeof s);
    }
  }
  if (c.quant == arfuseQuantNvfp4)
    EXPECT_TRUE(quant::refNvfp4Tensor(nv.data(), c.tokens, c.hidden, scale, c.layout, wantQ.data(), wantS.data()));
  int wrongQ = 0, wrongS = 0;
  for (size_t i = 0; i < qBytes; ++i) wrongQ += q0[i] != wantQ[i];
  if (c.quant != arfuseQuantFp8Static)
    for (size_t i = 0; i < sBytes; ++i) wrongS += s0[i] != wantS[i];
  EXPECT_EQ(wrongQ, 0) << "quantised bytes differing from the CPU reference, of " << qBytes;
  EXPECT_EQ(wrongS, 0) << "scale bytes differing from the CPU reference (padding included), of " << sBytes;
  return q0;
}

// Every quant mode and weight form on one path, 3 dtypes; then NVFP4 bytes with and without the
// optional outputs, which must not change them.
void everyQuantAndForm(int algo, int ranks, bool distinct) {
  const int tokens = algo == arfuseAlgoLowLatency ? 3 : 37;  // 37: a partial 128-row scale tile
  for (arfuseDataType_t dt : {arfuseBfloat16, arfuseFloat16, arfuseFloat32}) {
    // 4144 / 16 = 259 scale columns: the swizzled layout pads them to 260.
    const int hidden = dt == arfuseFloat32 && algo == arfuseAlgoLowLatency ? 2048 : 4144;
    for (int quant = 0; quant < arfuseNumQuants; ++quant)
      for (int layout = 0; layout < (quant == arfuseQuantNvfp4 ? 2 : 1); ++layout)
        runCase({algo, ranks, distinct, dt, tokens, hidden, quant, layout, quant == 0, quant == 1, true, true});
    const std::vector<uint8_t> alone =
        runCase({algo, ranks, distinct, dt, tokens, hidden, arfuseQuantNvfp4, 0, false, false, false, false});
    const std::vector<uint8_t> with =
        runCase({algo, ranks, distinct, dt, tokens, hidden, arfuseQuantNvfp4, 0, false, false, true, true});
    EXPECT_EQ(alone, with) << "NVFP4 bytes depend on whether norm_out / residual_out are written";
  }
}

std::string algoParamName(const ::testing::TestParamInfo<int>& i) {
  return std::string(i.param < 0 ? "auto" : arfuseAlgoName(arfuseAlgo_t(i.param)));
}

#if ARFUSE_TEST_MIN_GPUS >= 2
// One rank per GPU (every GPU of the machine): the peer paths over real links, the NCCL path (all-
// reduce into the workspace, then the same epilogue kernel) and whatever the plan picks.
class Gpu2_Epilogue : public ::testing::TestWithParam<int> {};

TEST_P(Gpu2_Epilogue, EveryQuantAndFormOnDistinctGpus) {
  int ngpu = 0;
  cudaGetDeviceCount(&ngpu);
  everyQuantAndForm(GetParam(), ngpu, true);
}

INSTANTIATE_TEST_SUITE_P(Paths, Gpu2_Epilogue,
                         ::testing::Values(int(arfuseAlgoLowLatency), int(arfuseAlgoOneShot), int(arfuseAlgoTwoShot),
                                           int(arfuseAlgoHostStaged), int(arfuseAlgoNccl), -1),
                         algoParamName);
#else
// Virtual ranks on GPU 0 (3 ranks; one rank for the local path).
class Gpu_Epilogue : public ::testing::TestWithParam<int> {};

TEST_P(Gpu_Epilogue, EveryQuantAndFormOnThisPath) {
  const int algo = GetParam();
  everyQuantAndForm(algo, algo == arfuseAlgoLocal ? 1 : 3, false);
}

INSTANTIATE_TEST_SUITE_P(Paths, Gpu_Epilogue,
                         ::testing::Values(int(arfuseAlgoLocal), int(arfuseAlgoLowLatency), int(arfuseAlgoOneShot),
                                           int(arfuseAlgoTwoShot), int(arfuseAlgoHostStaged)),
                         algoParamName);
#endif

}  // namespace
}  // namespace arfuse
