// Single-GPU residual add + RMSNorm (nranks == 1, arfuseAddRmsNorm, and the epilogue of the NCCL
// path). One CTA per row, grid-stride over rows; each thread keeps its vectors of the row in
// registers, so each element of x and residual_in is read once and residual_out and norm_out are
// written once: 4 x tokens x hidden x sizeof(T) bytes, the floor for this operation.
// `sources` > 1 (the deterministic NCCL mode): x holds every rank's input, gathered, and they are
// summed in fp32 in rank order from 0 exactly as every multi-rank path sums them, so the outputs are
// the same bits as theirs. The row reduction is the canonical one (device/rowsum.cuh).
// In place: norm_out may equal x and residual_out may equal residual_in (same thread, same vector).
#pragma once

#include "device/epilogue.cuh"

namespace arfuse {

// Resident 512-thread CTAs per SM ptxas is asked to allow for (its register budget). On sm_90 every
// variant its own choice did not spill keeps it (0: no minimum), and with it e7608fe's machine code,
// which change 14 measured (two CTAs per SM at 4 vectors, 63 registers; forcing one made it 80); the
// fp32 extended ones, which it spilled (12 and 60 bytes), get one CTA's 128 registers. Elsewhere every
// variant gets 128: the heuristic spilled the plain fp32 4-vector kernel on sm_80 (80 bytes) and three
// kernels on sm_100f, and no such GPU was there to measure what occupancy costs.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ != 900
constexpr int localMinBlocks(bool, bool) { return 1; }
#else
constexpr int localMinBlocks(bool ext, bool fp32) { return ext && fp32 ? 1 : 0; }
#endif

template <typename T, int kVecs, bool kExt = false>
__global__ void __launch_bounds__(kMaxThreads, localMinBlocks(kExt, sizeof(T) == 4))
    addRmsNormKernel(const __grid_constant__ LocalArgs a) {
  constexpr int E = Vec<T>::kElems;
  __shared__ RowScratch sm;
  const int nvec = a.hidden / E;
  const uint4* x = reinterpret_cast<const uint4*>(a.x);  // [sources][tokens, nvec]
  const uint4* residualIn = reinterpret_cast<const uint4*>(a.residualIn);
  const bool addResidual = !(kExt && a.ext.firstLayer);
  const size_t stride = a.sourceStride / E;  // in vectors
  pdlWait();
  WeightCache<kVecs> w;
  if (!kExt) w.load(reinterpret_cast<const uint4*>(a.weight), 0, nvec);
  for (int row = blockIdx.x; row < a.tokens; row += gridDim.x) {
    const size_t base = static_cast<size_t>(row) * nvec;
    uint4 packed[kVecs];
    if (!kExt && a.sources == 1) {
      // Every load of the row is issued before any is used (8 in flight per thread at 4 vectors):
      // with the source loop below in the same unrolled body, each vector's loads waited for the
      // previous vector's (72 % of the copy's bandwidth at 4096 x 7168 bf16). Not for the extended
      // epilogue, whose 8-vector variant would then spill.
      uint4 xv[kVecs], rv[kVecs];
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int v = threadIdx.x + i * blockDim.x;
        xv[i] = rv[i] = make_uint4(0, 0, 0, 0);
        if (v < nvec) {
          xv[i] = x[base + v];
          if (addResidual) rv[i] = residualIn[base + v];
        }
      }
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        float acc[E];
        Vec<T>::toFloat(xv[i], acc);
        packed[i] = roundSum<T>(acc, addResidual ? &rv[i] : nullptr, false);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kVecs; ++i) packed[i] = make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int v = threadIdx.x + i * blockDim.x;
        if (v >= nvec) continue;
        float acc[E];
        if (a.sources == 1) {
          Vec<T>::toFloat(x[base + v], acc);
        } else {
#pragma unroll
          for (int e = 0; e < E; ++e) acc[e] = 0.f;
          for (int s = 0; s < a.sources; ++s) {
            float f[E];
            Vec<T>::toFloat(x[s * stride + base + v], f);
#pragma unroll
            for (int e = 0; e < E; ++e) acc[e] += f[e];
          }
        }
        uint4 r;
        if (addResidual) r = residualIn[base + v];
        packed[i] = roundSum<T>(acc, addResidual ? &r : nullptr, false);
      }
    }
    if constexpr (kExt) {
      // Rolled pass 2 only where the unrolled one spilled (fp32, 8 vectors; docs/perf.md change 26).
      finishExtendedRow<T, kVecs, /*kOneLoad=*/true, /*kRolled=*/kVecs >= 8 && sizeof(T) == 4>(
          packed, false, reinterpret_cast<const uint4*>(a.weight), reinterpret_cast<uint4*>(a.normOut) + base,
          reinterpret_cast<uint4*>(a.residualOut) + base, nvec, a.hidden, a.invHidden, a.eps, a.ext, row, &sm);
    } else {
      finishFusedTile<T, kVecs, /*kOneLoad=*/true>(packed, w, reinterpret_cast<uint4*>(a.normOut) + base,
                                                   reinterpret_cast<uint4*>(a.residualOut) + base, 0, 1, nvec, nvec,
                                                   a.invHidden, a.eps, &sm);
    }
  }
}

// The deterministic NCCL path's all-reduce without an epilogue: out = round(sum of the gathered
// sources in rank order, from 0), the arithmetic of every multi-rank path.
template <typename T>
__global__ void __launch_bounds__(kMaxThreads, localMinBlocks(false, sizeof(T) == 4))
    sumSourcesKernel(const __grid_constant__ LocalArgs a) {
  constexpr int E = Vec<T>::kElems;
  const uint4* x = reinterpret_cast<const uint4*>(a.x);
  uint4* out = reinterpret_cast<uint4*>(a.residualOut);
  const size_t count = static_cast<size_t>(a.tokens) * (a.hidden / E), stride = a.sourceStride / E;
  pdlWait();
  for (size_t v = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; v < count;
       v += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float acc[E];
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = 0.f;
    for (int s = 0; s < a.sources; ++s) {
      float f[E];
      Vec<T>::toFloat(x[s * stride + v], f);
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] += f[e];
    }
    out[v] = Vec<T>::fromFloat(acc);
  }
}

}  // namespace arfuse
