// One-shot all-reduce (+ fused residual add and RMSNorm).
//
// Algorithm, per call, every rank, block b of G (rows b, b+G, b+2G, ... belong to block b on every rank):
//   1. copy-in: the block copies its rows of the caller's x into this rank's staging buffer of the
//      call's parity (the caller's buffer is never exposed to peers);
//   2. barrier: block b signals block b of every peer and waits for their signals (one round trip);
//   3. every rank reads the block's rows from all n staging buffers, sums them in fp32 in rank order,
//      and runs the epilogue on whole rows (so the norm needs no further exchange).
// Every rank computes the same sums in the same order: outputs are bitwise identical across ranks.
//
// Memory-ordering argument: the copy-in stores are ordered before the flag by __syncthreads +
// st.release.sys; peers' reads come after their ld.acquire.sys of that flag + __syncthreads, and use
// L2-only loads. Reuse safety: a rank overwrites the staging of parity p again only at call e+2; its
// kernel for e+2 starts after its kernel for e+1 ended, which passed a barrier that needed every peer
// to *start* e+1, i.e. every peer's kernel for call e had finished reading.
// Data bytes per rank: reads n x rows x hidden (one from itself), writes 3 x rows x hidden.
#pragma once

#include "kernels/epilogue.cuh"

namespace arfuse {

// Copies this block's rows of the caller's input into our staging buffer.
template <typename T>
__device__ inline void copyInRows(const KernelArgs& a, size_t parityOffset, int nvec) {
  const uint4* x = reinterpret_cast<const uint4*>(a.x);                                     // [tokens, nvec]
  uint4* stage = reinterpret_cast<uint4*>(a.peers.staging[a.rank] + parityOffset);          // [tokens, nvec]
  const int nrows = (a.tokens - static_cast<int>(blockIdx.x) + gridDim.x - 1) / gridDim.x;
  for (int k = threadIdx.x; k < nrows * nvec; k += blockDim.x) {
    const int j = k / nvec, v = k - j * nvec;
    const size_t idx = (static_cast<size_t>(blockIdx.x) + static_cast<size_t>(j) * gridDim.x) * nvec + v;
    stage[idx] = x[idx];
  }
}

template <typename T, bool kFused, bool kExt = false>
__global__ void __launch_bounds__(kMaxThreads) oneShotKernel(KernelArgs a) {
  constexpr int E = Vec<T>::kElems;
  const uint64_t call = beginCall(a);
  const size_t parityOffset = (call & 1) * a.stagingBytes;
  const int nvec = a.hidden / E;

  copyInRows<T>(a, parityOffset, nvec);
  // The first row's residual_in does not depend on peers: load it now so
  // their latency overlaps the barrier's round trip.
  const uint4* residualIn = reinterpret_cast<const uint4*>(a.residualIn);  // [tokens, nvec]
  const uint4* weight = reinterpret_cast<const uint4*>(a.weight);          // [nvec]
  RowInputs<T, true> in;
  if (kFused && !(kExt && a.ext.firstLayer)) in.load(residualIn + static_cast<size_t>(blockIdx.x) * nvec, nvec);
  if (!blockBarrier(a, call * 2, /*phase=*/0, call)) return;
  // After the barrier: a remote store before the release would make the release wait for it.
  sendDesc(a, a.peers.desc, call);

  for (int row = blockIdx.x; row < a.tokens; row += gridDim.x) {
    const size_t rowOffset = static_cast<size_t>(row) * nvec;
    auto sum = [&](int v, float* acc) { sumAcrossRanks<T>(a, parityOffset, rowOffset, v, acc); };
    if (kFused) {
      if (row != static_cast<int>(blockIdx.x) && !(kExt && a.ext.firstLayer)) in.load(residualIn + rowOffset, nvec);
      finishRow<T, true, kMaxVecsPerThread, kExt>(sum, in, weight, reinterpret_cast<uint4*>(a.normOut) + rowOffset,
                         reinterpret_cast<uint4*>(a.residualOut) + rowOffset, nvec, a.hidden, a.eps, kExt ? &a.ext : nullptr, row);
    } else {
      uint4* out = reinterpret_cast<uint4*>(a.residualOut) + rowOffset;  // [nvec]
      for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
        float acc[E];
        sum(v, acc);
        out[v] = Vec<T>::fromFloat(acc);
      }
    }
  }
  checkDesc(a, a.peers.desc, call, /*phase=*/3);  // sent right after the peer's barrier: there by now
  endCall(a, call);
}

}  // namespace arfuse
