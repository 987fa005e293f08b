// What the harness's World cases share (harness.cc: one call and the epilogue variants;
// sequences.cc: chained calls, graphs and shape sequences; timing.cc: graph timing): the buffer
// slots of a rank, reproducible fills, host tensors, one call's inputs, the CUDA-check macros and
// the fp64 references. Internal to tools/harness.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "harness/numeric.h"

namespace arfuse {
namespace harness {

constexpr int kSlots = 8;

// Counter-based random numbers: element i of a fill depends only on (stream, i), so fills can run
// in parallel and still be reproducible.
inline uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(mix(seed)) {}
  uint64_t nextStream() { return s = mix(s); }
};

// A host tensor in the dtype's bit layout.
struct HostTensor {
  arfuseDataType_t dtype;
  size_t n;
  std::vector<uint8_t> bytes;
  HostTensor(arfuseDataType_t d, size_t count) : dtype(d), n(count), bytes(count * numeric::elemSize(d)) {}
  float at(size_t i) const { return numeric::load(bytes.data(), i, dtype); }
  void set(size_t i, float f) { numeric::store(bytes.data(), i, f, dtype); }
  void fill(Rng& rng, float lo, float hi) {
    const uint64_t stream = rng.nextStream();
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < static_cast<long long>(n); ++i) {
      const float u = static_cast<float>((mix(stream ^ (static_cast<uint64_t>(i) * 0xD1B54A32D192ED03ull)) >> 40) *
                                         (1.0 / 16777216.0));
      set(i, lo + (hi - lo) * u);
    }
  }
};

inline std::string cudaText(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}

// Runs a CUDA call; on failure clears CUDA's last error, puts "<call text>: <CUDA's text>" in
// `errorText` and returns `failed` from the enclosing function. The call's text is stringified by
// the macros below (before any macro in it expands), so a message quotes the source as written.
#define HARNESS_CUDA_OR_RETURN(call, callText, errorText, failed) \
  do {                                                            \
    cudaError_t e_ = (call);                                      \
    if (e_ != cudaSuccess) {                                      \
      cudaGetLastError();                                         \
      (errorText) = cudaText(callText, e_);                       \
      return failed;                                              \
    }                                                             \
  } while (0)
// In a function building the CaseResult `res`, the Timing `t`, or returning false with *error. The
// result returned is marked failed: a CUDA error after `res.ok = true` must not pass a test.
#define H_CUDA(call) HARNESS_CUDA_OR_RETURN(call, #call, res.error, (res.ok = false, res))
#define T_CUDA(call) HARNESS_CUDA_OR_RETURN(call, #call, t.error, (t.ok = false, t))
#define B_CUDA(call) HARNESS_CUDA_OR_RETURN(call, #call, *error, false)

inline double relErr(const std::vector<double>& ref, const HostTensor& got) {
  double num = 0, den = 0;
  long long nans = 0;
#pragma omp parallel for reduction(+ : num, den, nans) schedule(static)
  for (long long i = 0; i < static_cast<long long>(ref.size()); ++i) {
    const double g = got.at(i);
    if (std::isnan(g)) {
      ++nans;
      continue;
    }
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
  }
  if (nans) return INFINITY;
  return std::sqrt(num / std::max(den, 1e-300));
}

inline bool anyNan(const HostTensor& t) {
  long long nans = 0;
#pragma omp parallel for reduction(+ : nans) schedule(static)
  for (long long i = 0; i < static_cast<long long>(t.n); ++i) nans += std::isnan(t.at(i)) ? 1 : 0;
  return nans != 0;
}

// fp64 RMSNorm of each row of `res` (given as doubles) times weight.
inline std::vector<double> normRef(const std::vector<double>& res, const HostTensor& w, int tokens, int hidden,
                                   double eps) {
  std::vector<double> out(res.size());
#pragma omp parallel for schedule(static)
  for (int t = 0; t < tokens; ++t) {
    const double* r = &res[static_cast<size_t>(t) * hidden];
    double sq = 0;
    for (int h = 0; h < hidden; ++h) sq += r[h] * r[h];
    const double inv = 1.0 / std::sqrt(sq / hidden + eps);
    for (int h = 0; h < hidden; ++h) out[static_cast<size_t>(t) * hidden + h] = r[h] * inv * w.at(h);
  }
  return out;
}

// The inputs of one call, drawn from spec.seed in a fixed order: x of ranks 0..n-1, then the
// residual and the weight, which every rank shares.
struct World::CallInputs {
  std::vector<HostTensor> xs;  // [rank]
  HostTensor resid, weight;
  CallInputs(const CaseSpec& spec, int nranks, size_t count)
      : xs(nranks, HostTensor(spec.dtype, count)), resid(spec.dtype, count), weight(spec.dtype, spec.hidden) {
    Rng rng(spec.seed);
    for (HostTensor& x : xs) x.fill(rng, -1.f, 1.f);
    resid.fill(rng, -1.f, 1.f);
    weight.fill(rng, 0.5f, 1.5f);
  }
};

// What an epilogue variant's call adds to uploadCall: the value of *scaleIn, and the bytes of
// quant_out (norm[1]) and scale_out (scale[0]) to poison.
struct World::EpilogueInputs {
  float scaleIn;
  size_t qBytes, sBytes;
};

struct World::RankBuffers {
  void* x[kSlots] = {};
  void* norm[kSlots] = {};
  void* res[2] = {};
  void* weight = nullptr;
  void* scale[kSlots] = {};  // epilogue scale_out, allocated on first use
  void* scaleIn = nullptr;   // epilogue *scaleIn (one float)
};

}  // namespace harness
}  // namespace arfuse
