// Two-shot all-reduce (+ fused residual add and RMSNorm): a pushed reduce-scatter by column slices,
// then a pulled gather; over peer access or host memory.
//
// Every tile's V vectors are split into n contiguous slices (slice q: [lo_q, lo_q + w_q), w_q the
// same to within one); rank q owns slice q of every tile. The region [b][parity] of rank q holds, for
// tile j at j x S vectors (S = twoShotTileVecs(V, n) >= V, device/args.h):
//   slot k (k = 0..n-2) at j S + k w_q: slice q of tile j from rank (q + 1 + k) mod n, which that
//   rank stored there itself; after the reduction, slot 0 holds slice q's rounded sums.
// Per call, CTA b (tiles as in device/args.h Tiling):
//   1. the entry settles first: a call it stops never writes into a peer's region;
//   2. push: for every peer q, slice q of each of the CTA's tiles goes from x straight into this
//      rank's slot of q's region (one pass over x; the wire is written, never waited on for a read;
//      no copy-in on the critical path). The loop runs over tiles x slice flat, so every thread has
//      work even where a slice is narrower than the CTA;
//   3. barrier 0 (flags carry the descriptor: a divergent call stops here);
//   4. rank r sums its slice of each tile over the n ranks in rank order (fp32; its own part from x,
//      the others from its own region: local reads), adds residual_in, rounds once, and writes the
//      result into slot 0 of the same vector (each vector's slots are read and written by one thread
//      only); over host memory also into its device staging, to gather its own slice locally;
//   5. barrier 1 (only after a successful phase 4: a failed call never says its slice is ready);
//   6. every rank gathers the n rounded slices of each tile (slice q from slot 0 of rank q) and
//      finishes it (device/epilogue.cuh). The norm's inputs are the same bits on every rank, so the
//      outputs are bitwise identical; and they are the same bits as one-shot's, element by element.
// Bytes per rank: (n-1)/n of the message written to peers in step 2 and read from peers in step 6,
// the 2(n-1)/n traffic of a ring; step 4 reads only local memory.
// Memory ordering: the pushes precede the flag of barrier 0 by __syncthreads + st.release.sys (as
// one-shot's copy-in); the owner reads them after its ld.acquire.sys of every flag.
// Reuse: rank r stores into rank q's region [b][p] at epoch e only after its CTA b passed barrier 0
// of epoch e-1, which needed every peer's CTA b to have started e-1, i.e. finished e-2: the last
// epoch that touched [b][p] (q's reduction, and every rank's gather of q's slot 0). Barrier counters:
// barrierCounter(epoch, 0) and (epoch, 1).
#pragma once

#include "algos/oneshot/kernel.cuh"

namespace arfuse {

__device__ __forceinline__ int sliceBegin(int r, int len, int n) {
  return static_cast<int>((static_cast<long long>(r) * len) / n);
}
__device__ __forceinline__ int sliceOwner(int u, int len, int n) {
  int c = static_cast<int>((static_cast<long long>(u) * n) / len);
  while (c + 1 < n && sliceBegin(c + 1, len, n) <= u) ++c;
  while (c > 0 && sliceBegin(c, len, n) > u) --c;
  return c;
}
// The slot of rank `src`'s part of slice `owner` in the owner's region (0..n-2).
__device__ __forceinline__ int twoShotSlot(int src, int owner, int n) { return (src - owner - 1 + 2 * n) % n; }

// Step 2 for one peer: slice [lo, lo + w) of each of the CTA's tiles, from x into `dst` (the slot's
// first vector of tile 0; tile j at j * S). Four loads in flight per thread before their stores.
__device__ __forceinline__ void pushSlice(const uint4* x, const TileCursor& tc, int lo, int w, int S, uint4* dst) {
  constexpr int kInFlight = 4;
  const int total = tc.tiles * w;
  for (int f0 = threadIdx.x; f0 < total; f0 += kInFlight * blockDim.x) {
    uint4 v[kInFlight];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      const int f = f0 + k * blockDim.x;
      if (f < total) v[k] = x[tc.at(f / w, lo + f % w)];
    }
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      const int f = f0 + k * blockDim.x;
      if (f < total) dst[static_cast<size_t>(f / w) * S + f % w] = v[k];
    }
  }
}

template <class X, typename T, bool kFused, int kVecs, bool kExt = false>
__global__ void __launch_bounds__(barrierMaxThreads(kVecs)) twoShotKernel(const __grid_constant__ KernelArgs a) {
  constexpr int E = Vec<T>::kElems;
  __shared__ RowScratch sm;
  const TileCursor tc(a);
  const int V = tc.chunkVecs, n = a.nranks, S = twoShotTileVecs(V, n);
  const uint4* x = reinterpret_cast<const uint4*>(a.x);                    // [tokens, nvec]
  const uint4* residualIn = reinterpret_cast<const uint4*>(a.residualIn);  // [tokens, nvec]
  const bool addResidual = kFused && !(kExt && a.ext.firstLayer);
  // Phase points (device/phase_clock.cuh): 0 start, 1 entered (before the wait), 2 after pdlWait,
  // 3 scatter barrier passed, 4 gather barrier passed, 5 tiles finished, 6 exited.
  CallState cs = enterThenWait(a);  // device/protocol.cuh
  const EntryCheck check = issueEntryCheck(a, cs);
  const int parity = static_cast<int>(cs.epoch & 1);
  const int lo = sliceBegin(a.rank, V, n), w = sliceBegin(a.rank + 1, V, n) - lo;
  uint4* mine = reinterpret_cast<uint4*>(X::region(a, a.rank, parity));  // [tiles][S]
  uint4* ownCopy = X::kRegionIsLocal ? mine : reinterpret_cast<uint4*>(PeerExchange::region(a, a.rank, parity));

  // A refused call (as in one-shot) pushes nothing and passes no barrier, but finishes with NaN.
  bool ok = settleEntry(a, &cs, check);
  if (ok) {
    for (int d = 1; d < n; ++d) {  // peers from rank + 1 on: the ranks start on different peers
      const int q = (a.rank + d) % n;
      const int qlo = sliceBegin(q, V, n), qw = sliceBegin(q + 1, V, n) - qlo;
      pushSlice(x, tc, qlo, qw, S, reinterpret_cast<uint4*>(X::region(a, q, parity)) + twoShotSlot(a.rank, q, n) * qw);
    }
    ok = ctaBarrier<X>(a, cs.epoch, /*phase=*/0);
  }
  PhaseClock::mark<3>();

  if (ok) {
    const int total = tc.tiles * w;
    for (int f = threadIdx.x; f < total; f += blockDim.x) {
      const int j = f / w, i = f % w;
      const size_t base = static_cast<size_t>(j) * S + i;  // slot 0 of this vector
      const size_t g = tc.at(j, lo + i);
      float acc[E];
      sumRankOrder<T>(
          n, a.rank, x[g],
          [&](int r) {
            return X::load(
                reinterpret_cast<const char*>(mine + base + static_cast<size_t>(twoShotSlot(r, a.rank, n)) * w));
          },
          acc);
      const uint4 r = addResidual ? residualIn[g] : uint4{};
      const uint4 rounded = roundSum<T>(acc, addResidual ? &r : nullptr, false);
      mine[base] = rounded;
      if (!X::kRegionIsLocal) ownCopy[base] = rounded;
    }
    ok = ctaBarrier<X>(a, cs.epoch, /*phase=*/1);
  }
  PhaseClock::mark<4>();
  pdlLaunchDependents();
  // The weight is loaded only now (its loads overlap the gather's): a register cache live across the
  // phases above would go to the stack.
  WeightCache<kVecs> wc;
  if (kFused && !kExt) wc.load(reinterpret_cast<const uint4*>(a.weight), tc.chunk * V, V);

  for (int j = 0; j < tc.tiles; ++j) {
    uint4 packed[kVecs] = {};
    forThreadVecs<kVecs>(V, [&](int i, int u) {
      if (!ok) {
        packed[i] = nanVec<T>();
        return;
      }
      const int owner = sliceOwner(u, V, n);
      const size_t off = static_cast<size_t>(j) * S + (u - sliceBegin(owner, V, n));
      packed[i] = owner == a.rank ? loadL2(ownCopy + off) : X::load(X::region(a, owner, parity) + off * 16);
    });
    finishTile<T, kFused, kVecs, kExt>(a, tc, j, packed, !ok, wc, &sm);
  }
  PhaseClock::mark<5>();
  exitCall(a, cs, !ok);
  PhaseClock::mark<6>();
  PhaseClock::report("twoshot", a.nranks, a.rank, cs.epoch, 7);
}

}  // namespace arfuse
