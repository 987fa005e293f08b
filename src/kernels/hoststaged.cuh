// Host-staged all-reduce (+ fused residual add and RMSNorm) for ranks without peer access.
//
// The group owns one exchange area in pinned host memory, mapped into every rank's GPU: per rank a
// slot of two parities (written only by that rank) and a flag array (written by its peers). No GPU
// ever touches another GPU's memory; every byte crosses each GPU's own PCIe link to host memory.
// A rank never reads its own contribution back from the host: it reads it from local memory.
//
// One-shot variant, per call, block b of G (rows b, b+G, ... on every rank):
//   1. write the block's rows of x into our slot (parity of the call);
//   2. barrier through host-memory flags (st.release.sys / ld.acquire.sys);
//   3. for each row: the fp32 sum in rank order, own rows from x, peers' rows from their slots,
//      then the shared epilogue.
//   Per rank over its link: writes B, reads (n-1) B, plus one flag round trip (B = message bytes).
// Two-shot variant (column slices, as in twoshot.cuh):
//   1. write the block's rows into our slot, except our own slice (nobody else needs it);
//   2. barrier 0;
//   3. reduce our slice of each row (own part from x, peers' from their slots, + residual_in),
//      round once, write it into our slot's slice and into our device staging buffer;
//   4. barrier 1;
//   5. gather each row's n rounded slices (ours from device memory) and finish the row.
//   Per rank over its link: writes (n-1)/n B + B/n, reads 2 (n-1)/n B, plus two flag round trips.
// Every rank adds the same values in the same order: outputs are bitwise identical across ranks.
//
// Ordering: data stores to host memory precede the flag by __syncthreads + st.release.sys; readers
// load data with volatile (system-scope relaxed) loads after their ld.acquire.sys of the flag and a
// __syncthreads. Reuse: as for the P2P paths (a slot of parity p is rewritten at call e+2, after a
// barrier of call e+1 that every peer reached only after finishing its reads of call e).
#pragma once

#include "kernels/oneshot.cuh"
#include "kernels/twoshot.cuh"

namespace arfuse {

// fp32 sum, in rank order, of vector v of a row: our own part from `own` (local memory), the
// peers' parts from their host slots. Loads are issued before the additions.
template <typename T>
__device__ inline void sumHost(const KernelArgs& a, size_t parityOffset, size_t rowOffset, int v, const uint4* own,
                               float* acc) {
  constexpr int E = Vec<T>::kElems;
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = 0.f;
  for (int r0 = 0; r0 < a.nranks; r0 += 4) {
    uint4 buf[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = r0 + j;
      if (r < a.nranks)
        buf[j] = r == a.rank ? own[rowOffset + v]
                             : loadHost16(reinterpret_cast<const uint4*>(a.host.slots[r] + parityOffset) + rowOffset + v);
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

// Writes this block's rows of x into our host slot; vectors in [skipLo, skipHi) are left out.
__device__ inline void copyRowsToHost(const KernelArgs& a, size_t parityOffset, int nvec, int skipLo, int skipHi) {
  const uint4* x = reinterpret_cast<const uint4*>(a.x);                            // [tokens, nvec]
  uint4* slot = reinterpret_cast<uint4*>(a.host.slots[a.rank] + parityOffset);     // [tokens, nvec]
  const int nrows = (a.tokens - static_cast<int>(blockIdx.x) + gridDim.x - 1) / gridDim.x;
  const int width = nvec - (skipHi - skipLo);
  for (int k = threadIdx.x; k < nrows * width; k += blockDim.x) {
    const int j = k / width;
    int v = k - j * width;
    if (v >= skipLo) v += skipHi - skipLo;
    const size_t idx = (static_cast<size_t>(blockIdx.x) + static_cast<size_t>(j) * gridDim.x) * nvec + v;
    slot[idx] = x[idx];
  }
}

template <typename T, bool kFused, bool kExt = false>
__global__ void __launch_bounds__(kMaxThreads) hostOneShotKernel(KernelArgs a) {
  constexpr int E = Vec<T>::kElems;
  const uint64_t call = beginCall(a);
  const size_t parityOffset = (call & 1) * a.hostSlotBytes;
  const int nvec = a.hidden / E;
  const uint4* x = reinterpret_cast<const uint4*>(a.x);

  copyRowsToHost(a, parityOffset, nvec, 0, 0);
  sendDesc(a, a.host.desc, call);
  const uint4* residualIn = reinterpret_cast<const uint4*>(a.residualIn);  // [tokens, nvec]
  const uint4* weight = reinterpret_cast<const uint4*>(a.weight);          // [nvec]
  RowInputs<T, true> in;
  if (kFused && !(kExt && a.ext.firstLayer)) in.load(residualIn + static_cast<size_t>(blockIdx.x) * nvec, nvec);
  if (!blockBarrier(a, a.host.flags, call * 2, /*phase=*/0, call)) return;
  const DescProbe desc = loadDesc(a, a.host.desc, call);  // compared at the end

  for (int row = blockIdx.x; row < a.tokens; row += gridDim.x) {
    const size_t rowOffset = static_cast<size_t>(row) * nvec;
    auto sum = [&](int v, float* acc) { sumHost<T>(a, parityOffset, rowOffset, v, x, acc); };
    if (kFused) {
      if (row != static_cast<int>(blockIdx.x) && !(kExt && a.ext.firstLayer)) in.load(residualIn + rowOffset, nvec);
      finishRow<T, true, kMaxVecsPerThread, kExt>(sum, in, weight, reinterpret_cast<uint4*>(a.normOut) + rowOffset,
                                            reinterpret_cast<uint4*>(a.residualOut) + rowOffset, nvec, a.hidden,
                                            a.eps, kExt ? &a.ext : nullptr, row);
    } else {
      uint4* out = reinterpret_cast<uint4*>(a.residualOut) + rowOffset;  // [nvec]; may alias x (same thread, same v)
      for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
        float acc[E];
        sum(v, acc);
        out[v] = Vec<T>::fromFloat(acc);
      }
    }
  }
  compareDesc(a, a.host.desc, desc, call, /*phase=*/3);
  endCall(a, call);
}

template <typename T, bool kFused, bool kExt = false>
__global__ void __launch_bounds__(kMaxThreads) hostTwoShotKernel(KernelArgs a) {
  constexpr int E = Vec<T>::kElems;
  const uint64_t call = beginCall(a);
  const size_t parityOffset = (call & 1) * a.hostSlotBytes;
  const size_t devParityOffset = (call & 1) * a.stagingBytes;
  const int nvec = a.hidden / E;
  const int n = a.nranks;
  const int lo = sliceBegin(a.rank, nvec, n), hi = sliceBegin(a.rank + 1, nvec, n);
  const uint4* x = reinterpret_cast<const uint4*>(a.x);
  uint4* mineDev = reinterpret_cast<uint4*>(a.peers.staging[a.rank] + devParityOffset);  // [tokens, nvec]

  copyRowsToHost(a, parityOffset, nvec, lo, hi);
  sendDesc(a, a.host.desc, call);
  if (!blockBarrier(a, a.host.flags, call * 2, /*phase=*/0, call)) return;
  const DescProbe desc = loadDesc(a, a.host.desc, call);  // compared at the end

  // Step 3: reduce our slice of each of this block's rows.
  {
    const int len = hi - lo;
    const int nrows = (a.tokens - static_cast<int>(blockIdx.x) + gridDim.x - 1) / gridDim.x;
    uint4* mineHost = reinterpret_cast<uint4*>(a.host.slots[a.rank] + parityOffset);  // [tokens, nvec]
    const uint4* resIn = reinterpret_cast<const uint4*>(a.residualIn);                   // [tokens, nvec]
    for (int k = threadIdx.x; k < nrows * len; k += blockDim.x) {
      const int j = k / len, v = lo + (k - j * len);
      const size_t rowOffset = (static_cast<size_t>(blockIdx.x) + static_cast<size_t>(j) * gridDim.x) * nvec;
      float acc[E];
      sumHost<T>(a, parityOffset, rowOffset, v, x, acc);
      if (kFused && !(kExt && a.ext.firstLayer)) {
        float r[E];
        Vec<T>::toFloat(resIn[rowOffset + v], r);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] += r[e];
      }
      const uint4 rounded = Vec<T>::fromFloat(acc);
      mineHost[rowOffset + v] = rounded;
      mineDev[rowOffset + v] = rounded;
    }
  }
  if (!blockBarrier(a, a.host.flags, call * 2 + 1, /*phase=*/1, call)) return;

  // Step 5: gather the rounded slices (ours from device memory) and finish each row.
  for (int row = blockIdx.x; row < a.tokens; row += gridDim.x) {
    const size_t rowOffset = static_cast<size_t>(row) * nvec;
    auto gathered = [&](int v) {
      if (v >= lo && v < hi) return mineDev[rowOffset + v];
      const int owner = sliceOwner(v, nvec, n);
      return loadHost16(reinterpret_cast<const uint4*>(a.host.slots[owner] + parityOffset) + rowOffset + v);
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
  compareDesc(a, a.host.desc, desc, call, /*phase=*/3);
  endCall(a, call);
}

}  // namespace arfuse
