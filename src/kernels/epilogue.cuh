// The shared epilogue: residual add + RMSNorm of one row, held by one thread block.
//
// Each thread owns the row's 16-byte vectors v = threadIdx.x + i * blockDim.x (i < kMaxVecsPerThread)
// and keeps the rounded residual of each in registers between the two passes, so the row is read
// once and written twice (residual_out, norm_out) with no re-read:
//   pass 1: r = round(sum(v) [+ residual_in(v)]) -> residual_out; sq += r^2 (of the rounded value)
//   blockSum(sq) -> inv_rms = rsqrt(sq / hidden + eps)            (deterministic order)
//   pass 2: norm_out(v) = round(r * inv_rms * weight(v))
// The norm is taken of the *rounded* residual (what an unfused engine storing the residual in the
// model dtype computes), which also lets the two-shot path gather rounded residual rows and
// normalise them locally with bit-identical results on every rank.
//
// `sum(v, acc)` supplies the fp32 values of vector v (a cross-rank sum, or one source).
// Aliasing: residual_out may equal residual_in (each element is read before it is written by the
// same thread); norm_out may equal the kernel's input x only if x is not read here (copy-in paths).
#pragma once

#include "kernels/device_common.cuh"

namespace arfuse {

template <typename T, bool kAddResidual, class SumFn>
__device__ inline void addRmsNormRow(SumFn sum, const uint4* residualIn, const uint4* weight,
                                     uint4* normOut, uint4* residualOut, int nvec, int hidden, float eps) {
  constexpr int E = Vec<T>::kElems;
  float cache[kMaxVecsPerThread][E];
  float sq = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxVecsPerThread; ++i) {
    const int v = threadIdx.x + i * blockDim.x;  // [hidden/E]
    if (v < nvec) {
      float acc[E];
      sum(v, acc);
      if (kAddResidual) {
        float r[E];
        Vec<T>::toFloat(residualIn[v], r);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] += r[e];
      }
      const uint4 packed = Vec<T>::fromFloat(acc);
      residualOut[v] = packed;
      Vec<T>::toFloat(packed, cache[i]);
#pragma unroll
      for (int e = 0; e < E; ++e) sq += cache[i][e] * cache[i][e];
    }
  }
  const float inv = rsqrtf(blockSum(sq) / static_cast<float>(hidden) + eps);
#pragma unroll
  for (int i = 0; i < kMaxVecsPerThread; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v < nvec) {
      float w[E], out[E];
      Vec<T>::toFloat(weight[v], w);
#pragma unroll
      for (int e = 0; e < E; ++e) out[e] = cache[i][e] * inv * w[e];
      normOut[v] = Vec<T>::fromFloat(out);
    }
  }
}

// fp32 sum, in rank order 0..n-1, of vector v of `row` across the n ranks' staging buffers.
template <typename T>
__device__ inline void sumAcrossRanks(const KernelArgs& a, size_t parityOffset, size_t rowOffset, int v,
                                      float* acc) {
  constexpr int E = Vec<T>::kElems;
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = 0.f;
  // Issue loads four ranks at a time before adding, for memory-level parallelism; the additions
  // still happen strictly in rank order.
  for (int r0 = 0; r0 < a.nranks; r0 += 4) {
    uint4 buf[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (r0 + j < a.nranks) {
        const uint4* src = reinterpret_cast<const uint4*>(a.peers.staging[r0 + j] + parityOffset) + rowOffset;
        buf[j] = loadShared16(src + v);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (r0 + j < a.nranks) {
        float f[E];
        Vec<T>::toFloat(buf[j], f);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] += f[e];
      }
    }
  }
}

}  // namespace arfuse
