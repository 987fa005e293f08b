// The shared epilogue of every path: residual add + RMSNorm (+ the extended epilogue's
// quantisation) of one tile, whose fp32 cross-rank sums the caller has computed.
//
// A thread owns the tile's vectors u = threadIdx.x + i * blockDim.x (i < kVecs). The caller hands
// in `packed`: round(sum [+ residual_in]) per vector, exactly representable in T, so 16 bytes per
// vector in registers instead of 32 in fp32. Then:
//   q(u) = sum of squares of the rounded values -> canonicalRowSquares (device/rowsum.cuh): the
//          row's total, the same bits on every rank, path and geometry;
//   inv  = rsqrt(total / hidden + eps);
//   residual_out(u) = packed, norm_out(u) = round(r * inv * w(u)).
// The norm is taken of the *rounded* residual (what an unfused engine storing the residual in the
// model dtype computes), which also lets the two-shot path gather rounded residual rows and
// normalise them locally with bit-identical results on every rank.
// A failed tile (a wait that timed out or saw the abort) passes NaN vectors: its q is NaN, so the
// row's total, inv and every norm of the row are NaN in every CTA of the row, and its residual
// vectors are NaN; vectors whose data did arrive keep their correct residual.
// Aliasing: every load of a thread precedes its stores and each vector is loaded and stored by the
// same thread, so residual_out may equal residual_in and norm_out may equal x.
#pragma once

#include <type_traits>

#include "device/args.h"
#include "device/caches.cuh"
#include "device/protocol.cuh"
#include "device/quant.cuh"
#include "device/rowsum.cuh"
#include "device/vec.cuh"

namespace arfuse {

// acc (fp32 sum of vector u_i) [+ residual] -> packed (rounded); NaN when failed.
template <typename T>
__device__ __forceinline__ uint4 roundSum(float* acc, const uint4* residual, bool failed) {
  constexpr int E = Vec<T>::kElems;
  if (failed) return nanVec<T>();
  if (residual) {
    float r[E];
    Vec<T>::toFloat(*residual, r);
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] += r[e];
  }
  return Vec<T>::fromFloat(acc);
}

// What a caller issues while a tile is finished (finishTile's `ahead`): nothing, by default.
struct NothingAhead {
  __device__ void operator()() const {}
};

// Residual add is done (packed); norm the tile's row and store both outputs of this tile.
// normOut / residualOut / the weight point at the tile's first vector.
// kPush: the row push for split rows (device/rowsum.cuh); lastTile: the CTA's last tile of the call.
// ahead(): called once the tile's squares are taken, before the row reduction: loads the caller issues
// there (the next tile's) fly during the reduction's barriers and the stores, with the registers of
// the squares already free.
template <typename T, int kVecs, bool kOneLoad = false, bool kPush = false, bool kCacheW, class Ahead = NothingAhead>
__device__ __forceinline__ void finishFusedTile(const uint4 (&packed)[kVecs], const WeightCache<kVecs, kCacheW>& w,
                                                uint4* normOut, uint4* residualOut, int chunk, int chunks,
                                                int chunkVecs, int nvec, float invHidden, float eps, RowScratch* sm,
                                                bool lastTile = false, Ahead&& ahead = Ahead{}) {
  constexpr int E = Vec<T>::kElems;
  const bool push = kPush && chunks > 1;
  // residual_out leaves before the row reduction where no release waits for it, so its stores
  // overlap the reduction (5 % at 4096 x 7168 bf16, 0.24 us at one token, H200): a CTA-local row,
  // and a pushed one (its exchange is the pushes and the CTA's own mbarrier). The cluster barrier of
  // an unpushed split row is a release, which would wait for those stores: there they go after it.
  const bool residualFirst = chunks == 1 || push;
  float q[kVecs];
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int u = threadIdx.x + i * blockDim.x;
    q[i] = 0.f;
    if (u < chunkVecs) {
      if (residualFirst) residualOut[u] = packed[i];
      float r[E];
      Vec<T>::toFloat(packed[i], r);
      q[i] = vectorSquares<E>(r);
    }
  }
  ahead();
  const float inv = rsqrtf(fmaf(
      canonicalRowSquares<kVecs, kOneLoad, kPush>(q, chunk, chunks, chunkVecs, nvec, sm, lastTile), invHidden, eps));
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int u = threadIdx.x + i * blockDim.x;
    if (u < chunkVecs) {
      if (!residualFirst) residualOut[u] = packed[i];
      float r[E], wf[E], out[E];
      Vec<T>::toFloat(packed[i], r);
      Vec<T>::toFloat(w.get(i, u), wf);
#pragma unroll
      for (int e = 0; e < E; ++e) out[e] = r[e] * inv * wf[e];
      normOut[u] = Vec<T>::fromFloat(out);
    }
  }
  PhaseClock::mark<kSubStored>();
  releaseRow(chunks, push && lastTile);
}

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

// The NVFP4 swizzled layout's padding of one row (extendedPass2).
__device__ __forceinline__ void zeroSwizzledPadding(const EpiArgs& e, int row, int hidden) {
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

// The extended epilogue's pass 2 (arfuseAllReduceEpilogue): from the rounded residual `packed`
// and 1/rms, the normalised values n = round(r * inv * w') with w' = w or 1 + w, rounded to T as an
// unfused engine would store them; norm_out if asked; then the quantised output from n:
//   FP8 static:    q = e4m3(n * quant::fp8StaticInvScale(s)),  s = *scaleIn;
//   FP8 per token: s = quant::fp8TokenScale(max |n| of the row) written to scaleOut[row], q = e4m3(n / s);
//   NVFP4:         per 16 consecutive elements, sf = quant::nvfp4BlockScale(amax, g) (E4M3), the
//                  values scaled by quant::nvfp4OutputScale(sf, g) and rounded to E2M1, two per byte.
// A 16-element block spans 16 / E consecutive vectors, which belong to consecutive lanes of one warp
// (v = threadIdx.x + i * blockDim.x, blockDim a multiple of 32), so its max is a 1- or 2-step shuffle.
// kRolled (the 8-vector variants of the multi-rank kernels, 512 threads: a 128-register budget; and
// the single-GPU fp32 one): the vectors are walked in a rolled loop over a rotating copy, p[0] being
// vector i -- static indices only, so the copy stays in registers, and one vector's conversion is live
// at a time -- which stops at the row's last vector. Unrolled, ptxas hoisted every vector's weight load
// and conversion and spilled up to 148 bytes (one-shot bf16).
template <typename T, int kVecs, bool kRolled = (kVecs >= 8)>
__device__ __forceinline__ void extendedPass2(const uint4 (&packed)[kVecs], float inv, const uint4* weight,
                                              uint4* normOut, int nvec, int hidden, const EpiArgs& e, int row) {
  constexpr int E = Vec<T>::kElems;
  constexpr int kGroup = 16 / E;  // vectors per NVFP4 block
  // Vector i of the walk: p[0] of the rotating copy (kRolled), packed[i] itself otherwise (unrolled:
  // the code of e7608fe, which spilled none of the variants that keep it).
  uint4 p[kVecs];
  if constexpr (kRolled) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) p[i] = packed[i];
  }
  auto rotate = [&p] {
    if constexpr (kRolled) {
      const uint4 first = p[0];
#pragma unroll
      for (int k = 0; k + 1 < kVecs; ++k) p[k] = p[k + 1];
      p[kVecs - 1] = first;
    }
  };
  auto normValues = [&](int i, int v, float* n) {
    float r[E], w[E], out[E];
    if constexpr (kRolled)
      Vec<T>::toFloat(p[0], r);
    else
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
  // kRolled: the walk stops after the row's last vector (uniform); `walked` counts the copy's rotations.
  int walked = 0;
  auto walk = [&](auto&& visit) {
    if constexpr (kRolled) {
#pragma unroll 1
      for (int i = 0; i < kVecs; ++i, rotate(), ++walked) {
        if (i * static_cast<int>(blockDim.x) >= nvec) break;
        visit(i);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kVecs; ++i) visit(i);
    }
  };
  walk([&](int i) {
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
  });
  auto perTokenPass = [&] {
    if (e.quant == kQuantFp8PerToken) {
      const float s = quant::fp8TokenScale(blockMax(amax));
      if (threadIdx.x == 0) static_cast<float*>(e.scaleOut)[row] = s;
      if constexpr (kRolled) {  // back to p[0] = vector 0
#pragma unroll 1
        for (; walked < kVecs; ++walked) rotate();
        walked = 0;
      }
      walk([&](int i) {
        const int v = threadIdx.x + i * blockDim.x;
        if (v >= nvec) return;
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
      });
    }
  };
  // Rolled, the padding goes last, once the rotating copy is dead (live across its stores, fp32 spilled).
  const bool padding = e.quant == kQuantNvfp4 && e.scaleLayout == quant::kSfLayoutSwizzled128x4;
  if constexpr (kRolled) {
    perTokenPass();
    if (padding) zeroSwizzledPadding(e, row, hidden);
  } else {
    if (padding) zeroSwizzledPadding(e, row, hidden);
    perTokenPass();
  }
}

// The extended epilogue's NaN outputs for one row (a failed or refused call): FP8 bytes 0x7F (E4M3
// NaN), NVFP4 data 0 with every block scale 0x7F (NaN once dequantised), per-token scale NaN,
// residual_out / norm_out NaN where requested. Whole rows only (the extended kernels never split rows).
template <typename T>
__device__ __forceinline__ void extendedNanRow(uint4* normOut, uint4* residualOut, int nvec, int hidden,
                                               const EpiArgs& e, int row) {
  constexpr int E = Vec<T>::kElems;
  for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
    if (e.writeResidual) residualOut[v] = nanVec<T>();
    if (e.writeNorm) normOut[v] = nanVec<T>();
  }
  if (e.quant == kQuantFp8Static || e.quant == kQuantFp8PerToken) {
    unsigned char* q = e.quantOut + static_cast<size_t>(row) * hidden;
    for (int k = threadIdx.x; k < hidden; k += blockDim.x) q[k] = 0x7F;
    if (e.quant == kQuantFp8PerToken && threadIdx.x == 0)
      static_cast<float*>(e.scaleOut)[row] = __int_as_float(0x7FC00000);
  } else if (e.quant == kQuantNvfp4) {
    unsigned char* q = e.quantOut + static_cast<size_t>(row) * (hidden / 2);
    for (int k = threadIdx.x; k < hidden / 2; k += blockDim.x) q[k] = 0;
    const int cols = hidden / 16;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
      static_cast<unsigned char*>(e.scaleOut)[quant::sfOffset(e.scaleLayout, row, c, e.tokens, cols)] = 0x7F;
  }
  (void)E;
}

// Extended epilogue of one whole row (chunks == 1): residual_out / norm_out as requested, then the
// quantised outputs (extendedPass2). `failed` must be uniform across the CTA.
template <typename T, int kVecs, bool kOneLoad = false, bool kRolled = (kVecs >= 8)>
__device__ __forceinline__ void finishExtendedRow(const uint4 (&packed)[kVecs], bool failed, const uint4* weight,
                                                  uint4* normOut, uint4* residualOut, int nvec, int hidden,
                                                  float invHidden, float eps, const EpiArgs& e, int row,
                                                  RowScratch* sm) {
  constexpr int E = Vec<T>::kElems;
  if (failed) {
    extendedNanRow<T>(normOut, residualOut, nvec, hidden, e, row);
    return;
  }
  float q[kVecs];
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    q[i] = 0.f;
    if (v < nvec) {
      float r[E];
      Vec<T>::toFloat(packed[i], r);
      q[i] = vectorSquares<E>(r);
      if (e.writeResidual) residualOut[v] = packed[i];
    }
  }
  const float inv = rsqrtf(fmaf(canonicalRowSquares<kVecs, kOneLoad>(q, 0, 1, nvec, nvec, sm), invHidden, eps));
  extendedPass2<T, kVecs, kRolled>(packed, inv, weight, e.writeNorm ? normOut : nullptr, nvec, hidden, e, row);
}

// The end of a multi-rank kernel's tile j: the extended epilogue (whole rows), the fused one (this
// CTA's chunk of the row), or the plain all-reduce's store of the rounded sum. `failed`: some input
// of the tile did not arrive (CTA-uniform; only the extended epilogue reads it, the others already
// hold NaN in `packed`). residual_out may alias x: each vector is written by the thread that read it.
// ahead(): called once in the tile's finish, before its row reduction (or its stores), for loads the
// caller wants in flight during it (finishFusedTile); it must not touch an output. The extended
// epilogue takes none (no kernel overlaps its quantising pass).
template <typename T, bool kFused, int kVecs, bool kExt, bool kPush = false, bool kCacheW, class Ahead = NothingAhead>
__device__ __forceinline__ void finishTile(const KernelArgs& a, const TileCursor& tc, int j,
                                           const uint4 (&packed)[kVecs], bool failed,
                                           const WeightCache<kVecs, kCacheW>& w, RowScratch* sm,
                                           Ahead&& ahead = Ahead{}) {
  const int V = tc.chunkVecs;
  const size_t base = tc.at(j, 0);
  if constexpr (kExt) {
    static_assert(std::is_same_v<std::decay_t<Ahead>, NothingAhead>, "the extended epilogue takes no ahead()");
    const size_t rowBase = static_cast<size_t>(tc.row(j)) * tc.nvec;
    finishExtendedRow<T, kVecs>(
        packed, failed, reinterpret_cast<const uint4*>(a.weight), reinterpret_cast<uint4*>(a.normOut) + rowBase,
        reinterpret_cast<uint4*>(a.residualOut) + rowBase, tc.nvec, a.hidden, a.invHidden, a.eps, a.ext, tc.row(j), sm);
  } else if constexpr (kFused) {
    finishFusedTile<T, kVecs, false, kPush>(packed, w, reinterpret_cast<uint4*>(a.normOut) + base,
                                            reinterpret_cast<uint4*>(a.residualOut) + base, tc.chunk, a.tiling.chunks,
                                            V, tc.nvec, a.invHidden, a.eps, sm, j == tc.tiles - 1, ahead);
  } else {
    ahead();
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int u = threadIdx.x + i * blockDim.x;
      if (u < V) reinterpret_cast<uint4*>(a.residualOut)[base + u] = packed[i];
    }
  }
}

}  // namespace arfuse
