// Two-shot all-reduce (+ fused residual add and RMSNorm): reduce-scatter by column slices, then gather.
//
// Every row's 16-byte vectors are split into n contiguous slices; rank r owns slice r of every row.
// Per call, block b of G (rows b, b+G, ... on every rank):
//   1. copy-in of the block's rows into this rank's staging buffer (parity of the call);
//   2. barrier 0;
//   3. rank r sums its slice of each row across all n staging buffers (fp32, rank order), adds
//      residual_in, rounds once, and writes the result over its *own* slice of its *own* staging
//      buffer (only rank r ever reads slice r of rank r's buffer in step 3, and it is the same thread
//      that reads then writes each vector);
//   4. barrier 1;
//   5. every rank gathers the n rounded slices of each row (slice q from rank q's buffer), writes
//      residual_out, and normalises the whole row locally (epilogue.cuh). The inputs to the norm are
//      the same bits on every rank, so the outputs are bitwise identical.
// Slicing by columns (not rows) keeps all ranks busy even for one token.
// Data bytes per rank: step 3 reads (n-1)/n of the rows from peers; step 5 reads (n-1)/n again: the
// 2(n-1)/n bus traffic of a ring, against (n-1) for one-shot, at the cost of a second round trip.
// Ordering and reuse: as in oneshot.cuh; the flag values are 2*call (barrier 0) and 2*call+1 (barrier 1).
#pragma once

#include "kernels/oneshot.cuh"

namespace arfuse {

__device__ inline int sliceBegin(int r, int nvec, int n) { return static_cast<int>((static_cast<long long>(r) * nvec) / n); }

__device__ inline int sliceOwner(int v, int nvec, int n) {
  int c = static_cast<int>((static_cast<long long>(v) * n) / nvec);
  while (c + 1 < n && sliceBegin(c + 1, nvec, n) <= v) ++c;
  while (c > 0 && sliceBegin(c, nvec, n) > v) --c;
  return c;
}

template <typename T, bool kFused, bool kExt = false>
__global__ void __launch_bounds__(kMaxThreads) twoShotKernel(KernelArgs a) {
  constexpr int E = Vec<T>::kElems;
  const uint64_t call = beginCall(a);
  const size_t parityOffset = (call & 1) * a.stagingBytes;
  const int nvec = a.hidden / E;
  const int n = a.nranks;

  copyInRows<T>(a, parityOffset, nvec);
  if (!blockBarrier(a, call * 2, /*phase=*/0, call)) return;
  sendDesc(a, a.peers.desc, call);  // after the release (see oneshot.cuh)

  // Step 3: reduce my slice of each of this block's rows.
  {
    const int lo = sliceBegin(a.rank, nvec, n), len = sliceBegin(a.rank + 1, nvec, n) - lo;
    const int nrows = (a.tokens - static_cast<int>(blockIdx.x) + gridDim.x - 1) / gridDim.x;
    uint4* mine = reinterpret_cast<uint4*>(a.peers.staging[a.rank] + parityOffset);  // [tokens, nvec]
    const uint4* resIn = reinterpret_cast<const uint4*>(a.residualIn);                 // [tokens, nvec]
    for (int k = threadIdx.x; k < nrows * len; k += blockDim.x) {
      const int j = k / len, v = lo + (k - j * len);
      const size_t rowOffset = (static_cast<size_t>(blockIdx.x) + static_cast<size_t>(j) * gridDim.x) * nvec;
      float acc[E];
      sumAcrossRanks<T>(a, parityOffset, rowOffset, v, acc);
      if (kFused && !(kExt && a.ext.firstLayer)) {
        float r[E];
        Vec<T>::toFloat(resIn[rowOffset + v], r);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] += r[e];
      }
      mine[rowOffset + v] = Vec<T>::fromFloat(acc);
    }
  }
  if (!blockBarrier(a, call * 2 + 1, /*phase=*/1, call)) return;

  // Step 5: gather the rounded slices and finish each row.
  for (int row = blockIdx.x; row < a.tokens; row += gridDim.x) {
    const size_t rowOffset = static_cast<size_t>(row) * nvec;
    auto gathered = [&](int v) {
      const int owner = sliceOwner(v, nvec, n);
      return loadShared16(reinterpret_cast<const uint4*>(a.peers.staging[owner] + parityOffset) + rowOffset + v);
    };
    if (kFused) {
      auto sum = [&](int v, float* acc) { Vec<T>::toFloat(gathered(v), acc); };
      addRmsNormRow<T, false, kMaxVecsPerThread, kExt>(sum, nullptr, reinterpret_cast<const uint4*>(a.weight),
                              reinterpret_cast<uint4*>(a.normOut) + rowOffset,
                              reinterpret_cast<uint4*>(a.residualOut) + rowOffset, nvec, a.hidden, a.eps, kExt ? &a.ext : nullptr, row);
    } else {
      uint4* out = reinterpret_cast<uint4*>(a.residualOut) + rowOffset;  // [nvec]
      for (int v = threadIdx.x; v < nvec; v += blockDim.x) out[v] = gathered(v);
    }
  }
  checkDesc(a, a.peers.desc, call, /*phase=*/3);
  endCall(a, call);
}

}  // namespace arfuse
