// The shared epilogue: residual add + RMSNorm of one row, held by one thread block.
//
// Each thread owns the row's 16-byte vectors v = threadIdx.x + i * blockDim.x (i < kMaxVecsPerThread).
// The caller may issue the row's residual_in loads early with RowInputs::load --
// the one-shot kernel does it before its barrier, so their latency hides behind the peers'.
// Then finishRow:
//   pass 1: r = round(sum(v) [+ residual_in(v)]), kept *packed* in registers (the rounded value is
//           exactly representable in T, so 16 bytes per vector instead of 32 in fp32);
//           sq += r^2 (of the rounded value). No store happens in this pass, so the loads of every
//           vector (and every peer) are independent and can all be in flight at once.
//   stores of residual_out; blockSum(sq) -> inv_rms = rsqrt(sq / hidden + eps)  (deterministic order)
//   pass 2: norm_out(v) = round(r * inv_rms * weight(v)).
// The norm is taken of the *rounded* residual (what an unfused engine storing the residual in the
// model dtype computes), which also lets the two-shot path gather rounded residual rows and
// normalise them locally with bit-identical results on every rank.
//
// `sum(v, acc)` supplies the fp32 values of vector v (a cross-rank sum, or one source).
// Aliasing: every load of a thread precedes its stores, and each vector is loaded and stored by the
// same thread, so residual_out may equal residual_in and norm_out may equal x.
#pragma once

#include "kernels/device_common.cuh"

namespace arfuse {

// The row's residual_in vectors of this thread. (The weight is read in pass 2 through the
// read-only cache: keeping it in registers too would spill at 512 threads x 8 vectors.)
// kVecs: vectors per thread this instantiation can hold (registers scale with it, so a smaller
// kVecs leaves room for more resident blocks).
template <typename T, bool kAddResidual, int kVecs = kMaxVecsPerThread>
struct RowInputs {
  uint4 residual[kAddResidual ? kVecs : 1];

  __device__ void load(const uint4* residualIn, int nvec) {
    if constexpr (kAddResidual) {
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int v = threadIdx.x + i * blockDim.x;  // [hidden/E]
        if (v < nvec) residual[i] = residualIn[v];
      }
    }
  }
};

template <typename T, bool kAddResidual, int kVecs, class SumFn>
__device__ inline void finishRow(SumFn sum, const RowInputs<T, kAddResidual, kVecs>& in, const uint4* weight,
                                 uint4* normOut, uint4* residualOut, int nvec, int hidden, float eps) {
  constexpr int E = Vec<T>::kElems;
  uint4 packed[kVecs];
  float sq = 0.f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v < nvec) {
      float acc[E];
      sum(v, acc);
      if (kAddResidual) {
        float r[E];
        Vec<T>::toFloat(in.residual[i], r);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] += r[e];
      }
      packed[i] = Vec<T>::fromFloat(acc);
      float rounded[E];
      Vec<T>::toFloat(packed[i], rounded);
#pragma unroll
      for (int e = 0; e < E; ++e) sq += rounded[e] * rounded[e];
    }
  }
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v < nvec) residualOut[v] = packed[i];
  }
  const float inv = rsqrtf(blockSum(sq) / static_cast<float>(hidden) + eps);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v < nvec) {
      float r[E], w[E], out[E];
      Vec<T>::toFloat(packed[i], r);
      Vec<T>::toFloat(__ldg(weight + v), w);
#pragma unroll
      for (int e = 0; e < E; ++e) out[e] = r[e] * inv * w[e];
      normOut[v] = Vec<T>::fromFloat(out);
    }
  }
}

template <typename T, bool kAddResidual, int kVecs = kMaxVecsPerThread, class SumFn>
__device__ inline void addRmsNormRow(SumFn sum, const uint4* residualIn, const uint4* weight, uint4* normOut,
                                     uint4* residualOut, int nvec, int hidden, float eps) {
  RowInputs<T, kAddResidual, kVecs> in;
  in.load(residualIn, nvec);
  finishRow<T, kAddResidual, kVecs>(sum, in, weight, normOut, residualOut, nvec, hidden, eps);
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
