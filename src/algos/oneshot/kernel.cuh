// One-shot all-reduce (+ fused residual add and RMSNorm), over peer access or host memory.
//
// Per call, CTA b (tiles as in device/args.h Tiling; a row may be split over a cluster of CTAs):
//   1. copy-in: the CTA's tiles of the caller's x go to its region [b][parity] of this rank's
//      exchange buffer (the caller's buffer is never exposed to peers: no registration);
//   2. barrier: CTA b signals CTA b of every peer and waits for theirs (one round trip); the flags
//      carry the call's descriptor, so a divergent call is caught here, before any output;
//   3. every rank reads the tiles from all n regions (its own part from x), sums them in fp32 in rank
//      order, and runs the epilogue (device/epilogue.cuh).
// Every rank computes the same sums in the same order: outputs are bitwise identical across ranks.
// Memory ordering: the copy-in stores precede the flag by __syncthreads + st.release.sys; peers'
// reads follow their ld.acquire.sys of it + __syncthreads, and bypass L1 (L2 or volatile host loads).
// Reuse: CTA b rewrites parity p at its epoch e+2 only after its epoch e+1 passed a barrier that
// needed every peer's CTA b to *start* e+1, i.e. to have finished reading parity p at e.
// Bytes per rank: reads (n-1) x B from peers, writes B locally (B = the message).
// Over HostExchange (the host-staged path) each rank writes B over its PCIe link to host memory and
// reads (n-1) B back from it; no GPU touches another GPU's memory.
#pragma once

#include <type_traits>

#include "device/caches.cuh"
#include "device/epilogue.cuh"
#include "device/exchange.cuh"
#include "device/phase_clock.cuh"

namespace arfuse {

// The one-shot variants ptxas's own register target spilled in the e7608fe build (sm_90): the extended
// 8-vector ones (the call state held to the exit, the quantising epilogue), the fp32 1-vector
// all-reduce (64 registers, 8 bytes) and the bf16 extended 2-vector one (12 bytes), over either
// exchange. They state their residency (device/exchange.cuh barrierStatesResidency); the 8-vector ones
// keep the call state in shared memory (device/protocol.cuh sharedCall).
template <typename T, bool kFused, int kVecs, bool kExt>
constexpr bool oneShotSpilledAtE7608fe() {
  return (kExt && kVecs == 8) || (!kFused && kVecs == 1 && sizeof(T) == 4) ||
         (kExt && kVecs == 2 && std::is_same_v<T, __nv_bfloat16>);
}

// kPush: the row push (device/rowsum.cuh), the instantiation for split rows of fused calls. kWide: the
// 2-vector instantiation of whole rows of 513-1024 vectors, on up to 512 threads (device/exchange.cuh
// barrierMaxThreads).
template <class X, typename T, bool kFused, int kVecs, bool kExt = false, bool kPush = false, bool kWide = false>
__global__ void __launch_bounds__(
    barrierMaxThreads(kVecs, kWide),
    barrierMinBlocks(kVecs, barrierStatesResidency(oneShotSpilledAtE7608fe<T, kFused, kVecs, kExt>(), kPush), kWide))
    oneShotKernel(const __grid_constant__ KernelArgs a) {
  constexpr int E = Vec<T>::kElems;
  // Peers' loads in flight per vector: 4 in the 8-vector variants where the 128-register budget of
  // 512 threads has no room for 8 (they spilled): the extended ones (their quantising epilogue), and on
  // sm_120 every one (4 bytes over in the fused ones).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
  constexpr int kSumInFlight = kVecs == 8 ? 4 : 8;
#else
  constexpr int kSumInFlight = kExt && kVecs == 8 ? 4 : 8;
#endif
  // Pairs of vectors summed together (device/exchange.cuh sumRanksPair) where the registers allow:
  // not in the extended variants (their quantising epilogue) nor the fp32 8-vector ones, where the
  // pair's loads spilled at 128 registers on sm_90 (4-212 bytes; tests/cpu/check_spills.py), and not
  // on sm_100 / sm_120, where the fused 2- and 8-vector ones spilled too (8-36 bytes).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
  constexpr bool kPairSums = false;
#else
  constexpr bool kPairSums = !kExt && !(sizeof(T) == 4 && kVecs == 8);
#endif
  __shared__ RowScratchOf<kPush> sm;
  const TileCursor tc(a);
  const int V = tc.chunkVecs;
  const uint4* x = reinterpret_cast<const uint4*>(a.x);                    // [tokens, nvec]
  const uint4* residualIn = reinterpret_cast<const uint4*>(a.residualIn);  // [tokens, nvec]
  const bool addResidual = kFused && !(kExt && a.ext.firstLayer);
  // Phase points (device/phase_clock.cuh): 0 start, 1 entered (before the wait), 2 after pdlWait,
  // 3 copied in, 4 barrier passed, 7 (last) tile summed, 5 tiles finished, 6 exited; the finish stamps
  // its own sub-points (phase_clock.cuh kSub*).
  // A refused call copies nothing and passes no barrier, but finishes its tiles with NaN (see
  // lowlatency/kernel.cuh: the CTAs of a split row must pass the same cluster barriers).
  // The 8-vector variants that spilled keep the call state in shared memory (see above).
  constexpr bool kShared = kVecs == 8 && oneShotSpilledAtE7608fe<T, kFused, kVecs, kExt>();
  if constexpr (kPush) rowPushInit(a.tiling.chunks > 1, &sm);
  CallState cs = enterThenWaitAs<kShared>(a);  // device/protocol.cuh
  // The lean variants (2 vectors, pair sums, a local region, no row push) keep every tile's loads one
  // step ahead: the copy-in loads tiles 1-2 before tile 0's stores, and tile j + 1's parts (every rank's,
  // its own copy-in included) and residual_in are loaded during tile j's finish (its `ahead` hook, as
  // two-shot's gather): each tile's trips were their own, after the previous tile's stores or finish
  // (docs/perf.md change 35). Their registers are the weight cache's, which they read where used. The
  // row-push and host-memory variants spilled with it (8-68 bytes, sm_90).
  constexpr bool kLean = kPairSums && kVecs == 2 && X::kRegionIsLocal && !kPush;
  InputCache<kVecs> own, res;
  own.load(x + tc.at(0, 0), V);
  if (addResidual) res.load(residualIn + tc.at(0, 0), V);
  WeightCache<kVecs, kVecs <= 2 && !kLean> w;
  if (kFused && !kExt) w.load(reinterpret_cast<const uint4*>(a.weight), tc.chunk * V, V);
  const EntryCheck check = issueEntryCheck(a, cs);  // in flight with the loads above
  const bool go = cs.status == kFlightOk;
  const int parity = static_cast<int>(cs.epoch & 1);

  char* mine = X::region(a, a.rank, parity);  // [tiles][chunkVecs] x 16 B
  if constexpr (kLean) {
    // Tiles in batches of 2, each batch's loads issued before the previous batch's stores (4 spilled).
    constexpr int kBatch = 2;
    uint4 batch[kBatch][kVecs];
    auto store = [&](int j, int i, const uint4& v) {
      const int u = threadIdx.x + i * blockDim.x;
      if (u < V) reinterpret_cast<uint4*>(mine)[static_cast<size_t>(j) * V + u] = v;
    };
    auto loadBatch = [&](int j0) {
#pragma unroll
      for (int t = 0; t < kBatch; ++t)
#pragma unroll
        for (int i = 0; i < kVecs; ++i) {
          const int u = threadIdx.x + i * blockDim.x;
          batch[t][i] = j0 + t < tc.tiles && u < V ? x[tc.at(j0 + t, u)] : make_uint4(0, 0, 0, 0);
        }
    };
    if (go && tc.tiles > 0) {
      if (tc.tiles > 1) loadBatch(1);
#pragma unroll
      for (int i = 0; i < kVecs; ++i) store(0, i, own.get(i, threadIdx.x + i * blockDim.x));
      for (int j0 = 1; j0 < tc.tiles; j0 += kBatch) {
        if (j0 > 1) loadBatch(j0);
#pragma unroll
        for (int t = 0; t < kBatch; ++t)
#pragma unroll
          for (int i = 0; i < kVecs; ++i)
            if (j0 + t < tc.tiles) store(j0 + t, i, batch[t][i]);
      }
    }
  } else {
    for (int j = 0; go && j < tc.tiles; ++j) {
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int u = threadIdx.x + i * blockDim.x;
        if (u < V)
          reinterpret_cast<uint4*>(mine)[static_cast<size_t>(j) * V + u] = j == 0 ? own.get(i, u) : x[tc.at(j, u)];
      }
    }
  }
  PhaseClock::mark<3>();
  // Settled before the barrier flag: a call it stops never lets a peer read its copy.
  const bool ok = settleEntryAs<kShared>(a, &cs, check) && ctaBarrier<X>(a, cs.epoch, /*phase=*/0);  // uniform
  PhaseClock::mark<4>();
  pdlLaunchDependents();

  if constexpr (kLean) {
    if (2 * a.nranks <= kSumInFlight) {
      const int n = a.nranks;
      const int u0 = threadIdx.x, u1 = u0 + blockDim.x;
      const bool has0 = u0 < V, has1 = u1 < V;
      uint4 parts[kSumInFlight];
      uint4 resid[2] = {addResidual ? res.get(0, u0) : uint4{}, addResidual ? res.get(1, u1) : uint4{}};  // tile j's
      auto loadParts = [&](int j) {
        loadRankPairParts<kSumInFlight>(
            n, has1,
            [&](int v, int r) {
              return X::load(X::region(a, r, parity) + (static_cast<size_t>(j) * V + (v ? u1 : u0)) * 16);
            },
            parts);
      };
      if (ok && has0 && tc.tiles > 0) loadParts(0);
      for (int j = 0; j < tc.tiles; ++j) {
        uint4 packed[kVecs] = {};
        if (has0) {
          if (ok) {
            addRankPairParts<T, kSumInFlight>(n, has1, parts, [&](int v, float* acc) {
              packed[v] = roundSum<T>(acc, addResidual ? &resid[v] : nullptr, false);
            });
          } else {
            packed[0] = packed[1] = nanVec<T>();
          }
        }
        PhaseClock::mark<kSubSummed>();
        finishTile<T, kFused, kVecs, kExt, kPush>(a, tc, j, packed, !ok, w, &sm, [&] {
          if (j + 1 >= tc.tiles || !has0) return;
          if (ok) loadParts(j + 1);
          if (addResidual) {
            resid[0] = residualIn[tc.at(j + 1, u0)];
            if (has1) resid[1] = residualIn[tc.at(j + 1, u1)];
          }
        });
      }
      finishCallAs<kShared>(a, cs, !ok, "oneshot");
      return;
    }
  }
  for (int j = 0; j < tc.tiles; ++j) {
    InputCache<kVecs> resj;
    if (addResidual && j > 0) resj.load(residualIn + tc.at(j, 0), V);
    uint4 packed[kVecs];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) packed[i] = make_uint4(0, 0, 0, 0);
    // Vector i of the thread: the peers' sum in rank order [+ residual], rounded.
    auto roundInto = [&](int i, int u, float* acc) {
      uint4 r;
      if (addResidual) r = j == 0 ? res.get(i, u) : resj.get(i, u);
      packed[i] = roundSum<T>(acc, addResidual ? &r : nullptr, !ok);
    };
    if (kPairSums && kVecs > 1 && 2 * a.nranks <= kSumInFlight) {
      // Two vectors at a time where both vectors' loads fit in flight together: one round trip
      // through the exchange per pair instead of one per vector (device/exchange.cuh sumRanksPair).
      auto offsetOf = [&](int u) { return (static_cast<size_t>(j) * V + u) * 16; };
      auto ownOf = [&](int i, int u) { return j == 0 ? own.get(i, u) : x[tc.at(j, u)]; };
#pragma unroll
      for (int i = 0; i + 1 < kVecs; i += 2) {
        const int u0 = threadIdx.x + i * blockDim.x, u1 = u0 + blockDim.x;
        if (u0 >= V) continue;
        const bool has1 = u1 < V;
        if (ok) {
          sumRanksPair<X, T, kSumInFlight>(a, parity, offsetOf(u0), offsetOf(has1 ? u1 : u0), ownOf(i, u0),
                                           has1 ? ownOf(i + 1, u1) : make_uint4(0, 0, 0, 0), has1,
                                           [&](int v, float* acc) { roundInto(i + v, u0 + v * blockDim.x, acc); });
        } else {
          float acc[E];
          roundInto(i, u0, acc);
          if (has1) roundInto(i + 1, u1, acc);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int u = threadIdx.x + i * blockDim.x;
        if (u >= V) continue;
        float acc[E];
        if (ok)
          sumRanks<X, T, kSumInFlight>(a, parity, (static_cast<size_t>(j) * V + u) * 16,
                                       j == 0 ? own.get(i, u) : x[tc.at(j, u)], acc);
        // (roundInto's body, written out: through the lambda the extended 8-vector variants spill)
        uint4 r;
        if (addResidual) r = j == 0 ? res.get(i, u) : resj.get(i, u);
        packed[i] = roundSum<T>(acc, addResidual ? &r : nullptr, !ok);
      }
    }
    PhaseClock::mark<kSubSummed>();
    finishTile<T, kFused, kVecs, kExt, kPush>(a, tc, j, packed, !ok, w, &sm);
  }
  finishCallAs<kShared>(a, cs, !ok, "oneshot");
}

// The kernel's instantiation over exchange X, as BarrierKernels (algos/barrier_launch.cuh) names it.
template <class X, typename T, bool kFused, int kVecs, bool kExt, bool kPush, bool kWide>
struct OneShotKernel {
  static void (*fn())(KernelArgs) { return oneShotKernel<X, T, kFused, kVecs, kExt, kPush, kWide>; }
};

}  // namespace arfuse
