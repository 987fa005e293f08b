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
//   2. push: slice q of the CTA's tiles goes from x straight into this rank's slot of q's region,
//      for every peer q (one pass over x; the wire is written, never waited on for a read; no
//      copy-in on the critical path): flat over tiles x w_q, in rounds that keep one load per peer
//      in flight per thread, the first round's loads issued before the entry settled;
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

// len <= kMaxVecsPerRow and r <= n <= kMaxRanks: the products fit 32 bits.
__device__ __forceinline__ int sliceBegin(int r, int len, int n) { return r * len / n; }
// The owner of vector u, from the slice begins of ranks 0..n (begin[], in shared memory).
__device__ __forceinline__ int sliceOwner(const int* begin, int u, int len, int n) {
  int c = u * n / len;  // at most one slice off
  while (c + 1 < n && begin[c + 1] <= u) ++c;
  while (c > 0 && begin[c] > u) --c;
  return c;
}
// The slot of rank `src`'s part of slice `owner` in the owner's region (0..n-2).
__device__ __forceinline__ int twoShotSlot(int src, int owner, int n) { return (src - owner - 1 + 2 * n) % n; }

// Step 2, one round: thread t takes item f of every peer's part (the peers in the order rank + 1,
// rank + 2, ...; peer q's part is slice q of the CTA's tiles, flat over tiles x w_q: tile f / w_q,
// vector lo_q + f % w_q) and stores it into this rank's slot of q's region. The loads of kPeers
// peers are in flight before their stores (one round trip per round, not one per peer); the first
// round's are issued before the entry settles.
template <class X, int kPeers>
struct PeerPush {
  const KernelArgs& a;
  const uint4* x;
  const TileCursor& tc;
  const int* begin;  // slice begins of ranks 0..n
  int S, parity;
  uint4 v[kPeers];
  __device__ void load(int f, int d0) {
    const int n = a.nranks;
#pragma unroll
    for (int k = 0; k < kPeers; ++k) {
      const int d = d0 + 1 + k, q = (a.rank + d) % n, lo = begin[q], w = begin[q + 1] - lo;
      // Defined everywhere (a conditionally set register array goes to the stack).
      v[k] = d < n && f < tc.tiles * w ? x[tc.at(f / w, lo + f % w)] : make_uint4(0, 0, 0, 0);
    }
  }
  __device__ void store(int f, int d0) const {
    const int n = a.nranks;
#pragma unroll
    for (int k = 0; k < kPeers; ++k) {
      const int d = d0 + 1 + k, q = (a.rank + d) % n, lo = begin[q], w = begin[q + 1] - lo;
      if (d >= n || f >= tc.tiles * w) continue;
      uint4* slot = reinterpret_cast<uint4*>(X::region(a, q, parity)) + twoShotSlot(a.rank, q, n) * w;
      slot[static_cast<size_t>(f / w) * S + f % w] = v[k];
    }
  }
};

// The two-shot variants ptxas's own register target spilled in the e7608fe build (sm_90): the extended
// 8-vector ones over either exchange, and over host memory the 16-bit fused 8-vector ones and the fp32
// fused 1-vector one (8 to 12 bytes each). They state their residency (device/exchange.cuh
// barrierStatesResidency); the 8-vector ones keep the call state in shared memory (device/protocol.cuh
// sharedCall), which held to the exit in registers was what they spilled.
template <class X, typename T, bool kFused, int kVecs, bool kExt>
constexpr bool twoShotSpilledAtE7608fe() {
  constexpr bool kHostFused = !X::kRegionIsLocal && kFused && !kExt;
  return (kExt && kVecs == 8) || (kHostFused && kVecs == 8 && sizeof(T) == 2) ||
         (kHostFused && kVecs == 1 && sizeof(T) == 4);
}
// The ones that spilled under that target once the gather ran one tile ahead (docs/perf.md change 34):
// the fused 2-vector ones over host memory (16-bit types, 24 bytes) and the fp32 fused 1-vector one
// over peer access (8 bytes). They state their residency too.
template <class X, typename T, bool kFused, int kVecs, bool kExt>
constexpr bool twoShotSpilledAhead() {
  constexpr bool kPlainFused = kFused && !kExt;
  return kPlainFused &&
         ((!X::kRegionIsLocal && kVecs == 2 && sizeof(T) == 2) || (X::kRegionIsLocal && kVecs == 1 && sizeof(T) == 4));
}

// kPush: the row push (device/rowsum.cuh), the instantiation for split rows of fused calls. kWide: the
// 2-vector instantiation of whole rows of 513-1024 vectors, on up to 512 threads (device/exchange.cuh
// barrierMaxThreads).
template <class X, typename T, bool kFused, int kVecs, bool kExt = false, bool kPush = false, bool kWide = false>
__global__ void __launch_bounds__(
    barrierMaxThreads(kVecs, kWide),
    barrierMinBlocks(kVecs,
                     barrierStatesResidency(twoShotSpilledAtE7608fe<X, T, kFused, kVecs, kExt>() ||
                                                twoShotSpilledAhead<X, T, kFused, kVecs, kExt>(),
                                            kPush),
                     kWide)) twoShotKernel(const __grid_constant__ KernelArgs a) {
  constexpr int E = Vec<T>::kElems;
  __shared__ RowScratchOf<kPush> sm;
  const TileCursor tc(a);
  const int V = tc.chunkVecs, n = a.nranks, S = twoShotTileVecs(V, n);
  const uint4* x = reinterpret_cast<const uint4*>(a.x);                    // [tokens, nvec]
  const uint4* residualIn = reinterpret_cast<const uint4*>(a.residualIn);  // [tokens, nvec]
  const bool addResidual = kFused && !(kExt && a.ext.firstLayer);
  // Phase points (device/phase_clock.cuh): 0 start, 1 entered (before the wait), 2 after pdlWait,
  // 3 scatter barrier passed, 4 gather barrier passed, 5 tiles finished, 6 exited.
  __shared__ int sBegin[kMaxRanks + 1];  // slice begins of ranks 0..n
  if (static_cast<int>(threadIdx.x) <= n) sBegin[threadIdx.x] = sliceBegin(threadIdx.x, V, n);
  // The 8-vector variants that spilled keep the call state in shared memory (see above).
  constexpr bool kShared = kVecs == 8 && twoShotSpilledAtE7608fe<X, T, kFused, kVecs, kExt>();
  // The reduction two items per trip and the gather one tile ahead (below) cost registers: the 1- and
  // 2-vector plain and fused variants take them. The 8-vector ones have none left (each spilled 24-36
  // bytes, 128 registers at 512 threads) and keep dc08966's code, as do the extended ones (their
  // quantising epilogue; the fp32 2-vector one spilled).
  constexpr bool kLean = kVecs <= 2 && !kExt;
  if constexpr (kPush) rowPushInit(a.tiling.chunks > 1, &sm);
  CallState cs = enterThenWaitAs<kShared>(a);  // device/protocol.cuh; its __syncthreads publishes sBegin
  const EntryCheck check = issueEntryCheck(a, cs);
  const int parity = static_cast<int>(cs.epoch & 1);
  const int lo = sBegin[a.rank], w = sBegin[a.rank + 1] - lo;
  uint4* mine = reinterpret_cast<uint4*>(X::region(a, a.rank, parity));  // [tiles][S]
  uint4* ownCopy = X::kRegionIsLocal ? mine : reinterpret_cast<uint4*>(PeerExchange::region(a, a.rank, parity));

  // A refused call (as in one-shot) pushes nothing and passes no barrier, but finishes with NaN.
  constexpr int kPeers = 4;  // peers per round trip (7 spill in the fused variants)
  PeerPush<X, kPeers> push{a, x, tc, sBegin, S, parity, {}};
  const int rounds = tc.tiles * ((V + n - 1) / n);        // items of the widest part
  if (cs.status == kFlightOk) push.load(threadIdx.x, 0);  // loads only: in flight with the check
  bool ok = settleEntryAs<kShared>(a, &cs, check);
  if (ok) {
    for (int f = threadIdx.x; f < rounds; f += blockDim.x)
      for (int d0 = 0; d0 < n - 1; d0 += kPeers) {
        if (f != static_cast<int>(threadIdx.x) || d0 != 0) push.load(f, d0);
        push.store(f, d0);
      }
    ok = ctaBarrier<X>(a, cs.epoch, /*phase=*/0);
  }
  PhaseClock::mark<3>();

  if (ok) {
    const int total = tc.tiles * w;
    // Item f of the owned slice: tile f / w, vector lo + f % w; its slot 0 in the region, its index in x.
    auto slot0 = [&](int f) { return static_cast<size_t>(f / w) * S + f % w; };
    auto inX = [&](int f) { return tc.at(f / w, lo + f % w); };
    auto slotOf = [&](size_t base, int r) {
      return reinterpret_cast<const char*>(mine + base + static_cast<size_t>(twoShotSlot(r, a.rank, n)) * w);
    };
    auto store = [&](size_t base, float* acc, const uint4& r) {
      const uint4 rounded = roundSum<T>(acc, addResidual ? &r : nullptr, false);
      mine[base] = rounded;
      if (!X::kRegionIsLocal) ownCopy[base] = rounded;
    };
    if (kLean && 2 * n <= 8) {
      // Two items per trip where both items' parts fit the 8 loads in flight (n <= 4): one after the
      // other, each item's loads (its parts, x and residual_in) waited for the previous item's sum and
      // store. Same additions in the same order (device/exchange.cuh sumRankOrderPair): the same bits.
      for (int f = threadIdx.x; f < total; f += 2 * blockDim.x) {
        const int f1 = f + blockDim.x;
        const bool has1 = f1 < total;
        const size_t base0 = slot0(f), base1 = has1 ? slot0(f1) : base0;
        const size_t g0 = inX(f), g1 = has1 ? inX(f1) : g0;
        const uint4 r0 = addResidual ? residualIn[g0] : uint4{}, r1 = addResidual && has1 ? residualIn[g1] : uint4{};
        sumRankOrderPair<T>(
            n, a.rank, x[g0], has1 ? x[g1] : uint4{}, has1,
            [&](int v, int r) { return X::load(slotOf(v ? base1 : base0, r)); },
            [&](int v, float* acc) { store(v ? base1 : base0, acc, v ? r1 : r0); });
      }
    } else {
      for (int f = threadIdx.x; f < total; f += blockDim.x) {
        const size_t base = slot0(f);  // slot 0 of this vector
        const size_t g = inX(f);
        float acc[E];
        sumRankOrder<T>(
            n, a.rank, x[g], [&](int r) { return X::load(slotOf(base, r)); }, acc);
        const uint4 r = addResidual ? residualIn[g] : uint4{};
        store(base, acc, r);
      }
    }
    ok = ctaBarrier<X>(a, cs.epoch, /*phase=*/1);
  }
  PhaseClock::mark<4>();
  pdlLaunchDependents();
  // The weight is loaded only now (its loads overlap the gather's): a register cache live across the
  // phases above would go to the stack.
  WeightCache<kVecs> wc;
  if (kFused && !kExt) wc.load(reinterpret_cast<const uint4*>(a.weight), tc.chunk * V, V);

  // Vector u of tile j's gathered row: slice `owner`'s rounded sums, from slot 0 of the owner's region.
  auto gather = [&](int j, int u) {
    const int owner = sliceOwner(sBegin, u, V, n);
    const size_t off = static_cast<size_t>(j) * S + (u - sBegin[owner]);
    return owner == a.rank ? loadL2(ownCopy + off) : X::load(X::region(a, owner, parity) + off * 16);
  };
  // One tile ahead: the thread's first kAhead vectors of tile j + 1 are loaded during tile j's finish
  // (its `ahead` hook, once the squares are taken), so that their trip overlaps the row reduction and
  // the stores instead of following them. Every tile's slices were reduced before barrier 1, so any
  // of them may be read from here on; the exchange regions are never an output.
  constexpr int kAhead = kLean ? kVecs : 0;
  uint4 ahead[kAhead > 0 ? kAhead : 1];
#pragma unroll
  for (int i = 0; i < kAhead; ++i) {
    const int u = threadIdx.x + i * blockDim.x;
    ahead[i] = ok && u < V && tc.tiles > 0 ? gather(0, u) : make_uint4(0, 0, 0, 0);
  }
  for (int j = 0; j < tc.tiles; ++j) {
    uint4 packed[kVecs] = {};
    forThreadVecs<kVecs>(V, [&](int i, int u) {
      if (!ok) {
        packed[i] = nanVec<T>();
        return;
      }
      packed[i] = i < kAhead ? ahead[i] : gather(j, u);
    });
    if constexpr (kAhead > 0) {
      finishTile<T, kFused, kVecs, kExt, kPush>(a, tc, j, packed, !ok, wc, &sm, [&] {
        if (!ok || j + 1 >= tc.tiles) return;
#pragma unroll
        for (int i = 0; i < kAhead; ++i) {
          const int u = threadIdx.x + i * blockDim.x;
          if (u < V) ahead[i] = gather(j + 1, u);
        }
      });
    } else {
      finishTile<T, kFused, kVecs, kExt, kPush>(a, tc, j, packed, !ok, wc, &sm);
    }
  }
  finishCallAs<kShared>(a, cs, !ok, "twoshot");
}

// The kernel's instantiation over exchange X, as BarrierKernels (algos/barrier_launch.cuh) names it.
template <class X, typename T, bool kFused, int kVecs, bool kExt, bool kPush, bool kWide>
struct TwoShotKernel {
  static void (*fn())(KernelArgs) { return twoShotKernel<X, T, kFused, kVecs, kExt, kPush, kWide>; }
};

}  // namespace arfuse
