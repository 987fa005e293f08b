// Helpers of the host-side-fix GPU tests (streams_test, replicas_test, the Gpu2_Groups tests):
// bf16 device tensors with fresh random contents or NaN poison, read-back, and the fp64 reference
// of the fused call computed from the inputs as they were read back from the GPU.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "harness/numeric.h"

namespace arfuse {
namespace fusedcheck {

using Host = std::vector<uint16_t>;  // bf16 bits

// A device buffer of n bf16 elements on `device`.
struct Tensor {
  uint16_t* d = nullptr;
  size_t n = 0;
  int device = 0;
  Tensor() = default;
  Tensor(int dev, size_t elems) : n(elems), device(dev) {
    cudaSetDevice(dev);
    cudaMalloc(&d, n * 2);
    poison();
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() {
    if (d) cudaFree(d);
  }
  void poison() {  // 0xFFFF: a bf16 NaN in every element; synchronous, before any call is enqueued
    cudaSetDevice(device);
    cudaMemset(d, 0xFF, n * 2);
    cudaDeviceSynchronize();
  }
  void upload(const Host& h) {
    cudaSetDevice(device);
    cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice);
  }
  Host download() const {
    Host h(n);
    cudaSetDevice(device);
    cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost);
    return h;
  }
};

// Fresh random bf16 values in [-scale, scale], never zero.
inline Host randomBf16(size_t n, std::mt19937& rng, float scale = 1.f) {
  std::uniform_real_distribution<float> u(-scale, scale);
  Host h(n);
  for (uint16_t& v : h) {
    float f = u(rng);
    if (f == 0.f) f = scale / 7.f;
    v = numeric::floatToBf16(f);
  }
  return h;
}

// ||got - ref|| / ||ref||; infinity when got holds a NaN (a poisoned element never written).
inline double relErr(const std::vector<double>& ref, const Host& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = numeric::bf16ToFloat(got[i]);
    if (std::isnan(g)) return INFINITY;
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

inline std::vector<double> sumReference(const std::vector<Host>& xs) {
  std::vector<double> s(xs[0].size(), 0.0);
  for (const Host& x : xs)
    for (size_t i = 0; i < s.size(); ++i) s[i] += numeric::bf16ToFloat(x[i]);
  return s;
}

struct FusedRef {
  std::vector<double> residual, norm;
};

// residual_out = residual_in + sum_r x_r; norm_out = rmsnorm(round_bf16(residual_out)) * w, in fp64.
inline FusedRef fusedReference(const std::vector<Host>& xs, const Host& residualIn, const Host& weight, int tokens,
                               int hidden, double eps) {
  FusedRef r;
  const std::vector<double> s = sumReference(xs);
  r.residual.resize(s.size());
  r.norm.resize(s.size());
  for (int t = 0; t < tokens; ++t) {
    double ss = 0;
    std::vector<double> rounded(hidden);
    for (int h = 0; h < hidden; ++h) {
      const size_t i = static_cast<size_t>(t) * hidden + h;
      r.residual[i] = numeric::bf16ToFloat(residualIn[i]) + s[i];
      rounded[h] = numeric::bf16ToFloat(numeric::floatToBf16(static_cast<float>(r.residual[i])));
      ss += rounded[h] * rounded[h];
    }
    const double inv = 1.0 / std::sqrt(ss / hidden + eps);
    for (int h = 0; h < hidden; ++h)
      r.norm[static_cast<size_t>(t) * hidden + h] = rounded[h] * inv * numeric::bf16ToFloat(weight[h]);
  }
  return r;
}

// bf16 outputs against an fp64 reference (targets.md: within ~1e-2 relative).
constexpr double kBf16Tolerance = 1e-2;

}  // namespace fusedcheck
}  // namespace arfuse
