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
#include "kernels/quant.cuh"

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

// Block-wide max of non-negative values (order-independent, so deterministic).
__device__ inline float blockMax(float v) {
  __shared__ float partial[32];
  __shared__ float total;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < ((blockDim.x + 31) >> 5) ? partial[lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, o));
    if (lane == 0) total = s;
  }
  __syncthreads();
  const float r = total;
  __syncthreads();
  return r;
}

// The extended epilogue's pass 2 (arfuseAllReduceEpilogue): from the rounded residual `packed`
// and 1/rms, the normalised values n = round(r * inv * w') with w' = w or 1 + w, rounded to T as an
// unfused engine would store them; norm_out if asked; then the quantised output from n:
//   FP8 static:    q = e4m3(n * quant::fp8StaticInvScale(s)),  s = *scaleIn;
//   FP8 per token: s = quant::fp8TokenScale(max |n| of the row) written to scaleOut[row], q = e4m3(n / s);
//   NVFP4:         per 16 consecutive elements, sf = quant::nvfp4BlockScale(amax, g) (E4M3), the
//                  values scaled by quant::nvfp4OutputScale(sf, g) and rounded to E2M1, two per byte.
// A 16-element block spans 16 / E consecutive vectors, which belong to consecutive lanes of one warp
// (v = threadIdx.x + i * blockDim.x, blockDim a multiple of 32), so its max is a 1- or 2-step shuffle.
template <typename T, int kVecs>
__device__ inline void extendedPass2(const uint4 (&packed)[kVecs], float inv, const uint4* weight, uint4* normOut,
                                     int nvec, int hidden, const EpiArgs& e, int row) {
  constexpr int E = Vec<T>::kElems;
  constexpr int kGroup = 16 / E;  // vectors per NVFP4 block
  auto normValues = [&](int i, int v, float* n) {
    float r[E], w[E], out[E];
    Vec<T>::toFloat(packed[i], r);
    Vec<T>::toFloat(__ldg(weight + v), w);
#pragma unroll
    for (int k = 0; k < E; ++k) out[k] = r[k] * inv * (e.weightPlusOne ? 1.f + w[k] : w[k]);
    const uint4 rounded = Vec<T>::fromFloat(out);
    Vec<T>::toFloat(rounded, n);
    return rounded;
  };
  float amax = 0.f;
  const float staticInv = e.quant == kQuantFp8Static ? quant::fp8StaticInvScale(__ldg(e.scaleIn)) : 0.f;
  const float g = e.quant == kQuantNvfp4 ? __ldg(e.scaleIn) : 0.f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    const bool active = v < nvec;
    float n[E];
#pragma unroll
    for (int k = 0; k < E; ++k) n[k] = 0.f;
    if (active) {
      const uint4 rounded = normValues(i, v, n);
      if (normOut) normOut[v] = rounded;
    }
    float local = 0.f;
#pragma unroll
    for (int k = 0; k < E; ++k) local = fmaxf(local, fabsf(n[k]));
    if (e.quant == kQuantFp8Static && active) {
      uint32_t w[E / 2];
#pragma unroll
      for (int k = 0; k < E / 2; ++k)
        w[k] = cvtE4m3x2(quant::mulRn(n[2 * k], staticInv), quant::mulRn(n[2 * k + 1], staticInv));
      unsigned char* q = e.quantOut + static_cast<size_t>(row) * hidden + static_cast<size_t>(v) * E;
      if constexpr (E == 8)
        *reinterpret_cast<uint2*>(q) = make_uint2(w[0] | w[1] << 16, w[2] | w[3] << 16);
      else
        *reinterpret_cast<uint32_t*>(q) = w[0] | w[1] << 16;
    } else if (e.quant == kQuantFp8PerToken) {
      amax = fmaxf(amax, local);
    } else if (e.quant == kQuantNvfp4) {
      // All lanes take part in the shuffles (inactive ones with zeros): blocks never straddle the
      // end of a row because hidden is a multiple of 16.
      float blockAmax = local;
#pragma unroll
      for (int o = 1; o < kGroup; o <<= 1) blockAmax = fmaxf(blockAmax, __shfl_xor_sync(0xffffffffu, blockAmax, o));
      if (active) {
        const uint8_t sf = quant::nvfp4BlockScale(blockAmax, g);
        const float os = quant::nvfp4OutputScale(sf, g);
        uint32_t bits = 0;
#pragma unroll
        for (int k = 0; k < E / 2; ++k)
          bits |= cvtE2m1x2(quant::mulRn(n[2 * k], os), quant::mulRn(n[2 * k + 1], os)) << (8 * k);
        unsigned char* q = e.quantOut + static_cast<size_t>(row) * (hidden / 2) + static_cast<size_t>(v) * (E / 2);
        if constexpr (E == 8)
          *reinterpret_cast<uint32_t*>(q) = bits;
        else
          *reinterpret_cast<uint16_t*>(q) = static_cast<uint16_t>(bits);
        if (v % kGroup == 0) {
          const int col = v / kGroup, cols = hidden / 16;
          static_cast<unsigned char*>(e.scaleOut)[quant::sfOffset(e.scaleLayout, row, col, e.tokens, cols)] = sf;
        }
      }
    }
  }
  if (e.quant == kQuantNvfp4 && e.scaleLayout == quant::kSfLayoutSwizzled128x4) {
    // The swizzled layout's padding is read by the GEMM and must be zero: this row's padded columns,
    // and, from the last row's block, the padded rows of the last 128-row tile.
    const int cols = hidden / 16, pcols = static_cast<int>(quant::sfPaddedCols(e.scaleLayout, cols));
    unsigned char* sfo = static_cast<unsigned char*>(e.scaleOut);
    for (int c = cols + static_cast<int>(threadIdx.x); c < pcols; c += blockDim.x)
      sfo[quant::sfOffset(e.scaleLayout, row, c, e.tokens, cols)] = 0;
    if (row == e.tokens - 1) {
      // One block zeroes up to 127 x pcols bytes here (56 KiB at hidden 7168, one token): a row's 4
      // columns of a tile are one aligned 32-bit word of the layout, so store words, not bytes.
      const int prows = static_cast<int>(quant::sfPaddedRows(e.scaleLayout, e.tokens));
      const int tiles = pcols / 4;
      if ((reinterpret_cast<uintptr_t>(sfo) & 3u) == 0) {
        for (int k = threadIdx.x; k < (prows - e.tokens) * tiles; k += blockDim.x) {
          const size_t at = quant::sfOffset(e.scaleLayout, e.tokens + k / tiles, (k % tiles) * 4, e.tokens, cols);
          *reinterpret_cast<uint32_t*>(sfo + at) = 0u;
        }
      } else {
        for (int k = threadIdx.x; k < (prows - e.tokens) * pcols; k += blockDim.x)
          sfo[quant::sfOffset(e.scaleLayout, e.tokens + k / pcols, k % pcols, e.tokens, cols)] = 0;
      }
    }
  }
  if (e.quant == kQuantFp8PerToken) {
    const float s = quant::fp8TokenScale(blockMax(amax));
    if (threadIdx.x == 0) static_cast<float*>(e.scaleOut)[row] = s;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int v = threadIdx.x + i * blockDim.x;
      if (v >= nvec) continue;
      float n[E];
      normValues(i, v, n);
      uint32_t w[E / 2];
#pragma unroll
      for (int k = 0; k < E / 2; ++k) w[k] = cvtE4m3x2(quant::divRn(n[2 * k], s), quant::divRn(n[2 * k + 1], s));
      unsigned char* q = e.quantOut + static_cast<size_t>(row) * hidden + static_cast<size_t>(v) * E;
      if constexpr (E == 8)
        *reinterpret_cast<uint2*>(q) = make_uint2(w[0] | w[1] << 16, w[2] | w[3] << 16);
      else
        *reinterpret_cast<uint32_t*>(q) = w[0] | w[1] << 16;
    }
  }
}

// kExt (arfuseAllReduceEpilogue only): residual_in may be absent (first layer), residual_out and
// norm_out optional, w or 1 + w, and a quantised output; the plain instantiations are unchanged.
template <typename T, bool kAddResidual, int kVecs, bool kExt = false, class SumFn>
__device__ inline void finishRow(SumFn sum, const RowInputs<T, kAddResidual, kVecs>& in, const uint4* weight,
                                 uint4* normOut, uint4* residualOut, int nvec, int hidden, float eps,
                                 const EpiArgs* ext = nullptr, int row = 0) {
  constexpr int E = Vec<T>::kElems;
  uint4 packed[kVecs];
  float sq = 0.f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v < nvec) {
      float acc[E];
      sum(v, acc);
      if (kAddResidual && !(kExt && ext->firstLayer)) {
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
  if (!kExt || ext->writeResidual) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int v = threadIdx.x + i * blockDim.x;
      if (v < nvec) residualOut[v] = packed[i];
    }
  }
  const float inv = rsqrtf(blockSum(sq) / static_cast<float>(hidden) + eps);
  if constexpr (kExt) {
    extendedPass2<T, kVecs>(packed, inv, weight, ext->writeNorm ? normOut : nullptr, nvec, hidden, *ext, row);
  } else {
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
}

template <typename T, bool kAddResidual, int kVecs = kMaxVecsPerThread, bool kExt = false, class SumFn>
__device__ inline void addRmsNormRow(SumFn sum, const uint4* residualIn, const uint4* weight, uint4* normOut,
                                     uint4* residualOut, int nvec, int hidden, float eps,
                                     const EpiArgs* ext = nullptr, int row = 0) {
  RowInputs<T, kAddResidual, kVecs> in;
  if (!kExt || !ext->firstLayer) in.load(residualIn, nvec);
  finishRow<T, kAddResidual, kVecs, kExt>(sum, in, weight, normOut, residualOut, nvec, hidden, eps, ext, row);
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
