// Two-shot all-reduce (+ fused residual add and RMSNorm): reduce-scatter by column slices, then
// gather; over peer access or host memory.
//
// Every tile's vectors are split into n contiguous slices; rank r owns slice r of every tile.
// Per call, CTA b (tiles as in device/args.h Tiling):
//   1. copy-in of the CTA's tiles, except this rank's own slice (only peers read a region, and each
//      only its own slice), into region [b][parity];
//   2. barrier 0 (flags carry the descriptor: a divergent call stops here);
//   3. rank r sums its slice of each tile across all n regions (fp32, rank order; its own part from
//      x), adds residual_in, rounds once, and writes the result over its own slice of its own region
//      (and, over host memory, into its device staging too, to gather its own slice locally);
//   4. barrier 1 (only after a successful phase 3: a failed call never says its slice is ready);
//   5. every rank gathers the n rounded slices of each tile (slice q from rank q) and finishes it
//      (device/epilogue.cuh). The norm's inputs are the same bits on every rank, so the outputs are
//      bitwise identical; and they are the same bits as one-shot's, element by element.
// Bytes per rank: steps 3 and 5 each read (n-1)/n of the message from peers: the 2(n-1)/n traffic of
// a ring, against (n-1) for one-shot, for a second round trip. Ordering and reuse as in one-shot;
// the counters of the two barriers are barrierCounter(epoch, 0) and (epoch, 1).
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

template <class X, typename T, bool kFused, int kVecs, bool kExt = false>
__global__ void __launch_bounds__(barrierMaxThreads(kVecs)) twoShotKernel(const __grid_constant__ KernelArgs a) {
  constexpr int E = Vec<T>::kElems;
  __shared__ RowScratch sm;
  const TileCursor tc(a);
  const int V = tc.chunkVecs, n = a.nranks;
  const uint4* x = reinterpret_cast<const uint4*>(a.x);                    // [tokens, nvec]
  const uint4* residualIn = reinterpret_cast<const uint4*>(a.residualIn);  // [tokens, nvec]
  const bool addResidual = kFused && !(kExt && a.ext.firstLayer);
  // Phase points (device/phase_clock.cuh): 0 start, 1 entered (before the wait), 2 after pdlWait,
  // 3 scatter barrier passed, 4 gather barrier passed, 5 tiles finished, 6 exited.
  PhaseClock::mark<0>();
  CallState cs = enterCall(a);  // before pdlWait: device/protocol.cuh
  PhaseClock::mark<1>();
  pdlWait();
  PhaseClock::mark<2>();
  const EntryCheck check = issueEntryCheck(a, cs);
  const bool go = cs.status == kFlightOk;  // refused: as in one-shot
  const int parity = static_cast<int>(cs.epoch & 1);
  const int lo = sliceBegin(a.rank, V, n), hi = sliceBegin(a.rank + 1, V, n);
  uint4* mine = reinterpret_cast<uint4*>(X::region(a, a.rank, parity));  // [tiles][chunkVecs]
  uint4* ownCopy = X::kRegionIsLocal ? mine : reinterpret_cast<uint4*>(PeerExchange::region(a, a.rank, parity));

  for (int j = 0; go && j < tc.tiles; ++j)
    for (int u = threadIdx.x; u < V; u += blockDim.x)
      if (u < lo || u >= hi) mine[static_cast<size_t>(j) * V + u] = x[tc.at(j, u)];
  // Settled before the first barrier flag: a call it stops never lets a peer read its copy.
  bool ok = settleEntry(a, &cs, check) && ctaBarrier<X>(a, cs.epoch, /*phase=*/0);
  PhaseClock::mark<3>();

  if (ok) {
    for (int j = 0; j < tc.tiles; ++j) {
      for (int u = lo + static_cast<int>(threadIdx.x); u < hi; u += blockDim.x) {
        float acc[E];
        sumRanks<X, T>(a, parity, (static_cast<size_t>(j) * V + u) * 16, x[tc.at(j, u)], acc);
        const uint4 r = addResidual ? residualIn[tc.at(j, u)] : uint4{};
        const uint4 rounded = roundSum<T>(acc, addResidual ? &r : nullptr, false);
        mine[static_cast<size_t>(j) * V + u] = rounded;
        if (!X::kRegionIsLocal) ownCopy[static_cast<size_t>(j) * V + u] = rounded;
      }
    }
    ok = ctaBarrier<X>(a, cs.epoch, /*phase=*/1);
  }
  PhaseClock::mark<4>();
  pdlLaunchDependents();
  // The weight is loaded only now (its loads overlap the gather's): a register cache live across the
  // phases above would go to the stack.
  WeightCache<kVecs> w;
  if (kFused && !kExt) w.load(reinterpret_cast<const uint4*>(a.weight), tc.chunk * V, V);

  for (int j = 0; j < tc.tiles; ++j) {
    uint4 packed[kVecs];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) packed[i] = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int u = threadIdx.x + i * blockDim.x;
      if (u >= V) continue;
      const size_t off = static_cast<size_t>(j) * V + u;
      if (!ok) {
        packed[i] = nanVec<T>();
      } else {
        const int owner = sliceOwner(u, V, n);
        packed[i] = owner == a.rank ? loadL2(ownCopy + off) : X::load(X::region(a, owner, parity) + off * 16);
      }
    }
    finishTile<T, kFused, kVecs, kExt>(a, tc, j, packed, !ok, w, &sm);
  }
  PhaseClock::mark<5>();
  exitCall(a, cs, !ok);
  PhaseClock::mark<6>();
  PhaseClock::report("twoshot", a.nranks, a.rank, cs.epoch, 7);
}

}  // namespace arfuse
