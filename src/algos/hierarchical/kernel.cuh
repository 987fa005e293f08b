// Hierarchical all-reduce (+ fused residual add and RMSNorm) for groups that span hosts: the two
// intra-host kernels around the NCCL all-reduce across hosts (api/enqueue.cc issues the three).
//
// The message (count = tokens x hidden elements, flat) is cut into L slices of S elements
// (S = ceil(count / L) rounded up to 8: no 16-byte vector straddles two slices); local rank j owns
// slice j, elements [j S, (j + 1) S) (the last slices may run past count: zeros there).
//
// Phase 1, hierReduceScatterKernel, CTA b of B1 (B1 the same on every local rank):
//   1. copy-in: for every slice j != mine, the CTA's part of it (vectors [b per, (b + 1) per) of the
//      slice, per = ceil(S / E / B1)) goes from x to the same place of this rank's `in` buffer;
//   2. per-CTA barrier over the L local ranks (device/protocol.cuh ctaBarrier: descriptor in the
//      flag, bounded wait naming the local rank, the abort);
//   3. CTA b sums its part of slice `mine` over the L local ranks in fp32, in local-rank order 0..L-1
//      (its own part from x, the others' from their `in`, read through L2), and stores the fp32 sums
//      into slices[mine]. What CTA b reads of rank q was written by CTA b of rank q before its flag.
// Between the kernels: ncclAllReduce(slices[mine], S, ncclFloat32, ncclSum) among the ranks with
// local index `mine` on every host (NCCL's order; the same result on every rank of it).
// Phase 2, hierGatherKernel, rows over B3 CTAs (whole rows, TileCursor with chunks = 1):
//   1. barrier over the local ranks: a peer arrives only once its NCCL all-reduce has completed
//      (stream order; a system-scope fence before the flag), so every slice is final;
//   2. each row's vectors are read from the owning rank's slice (fp32), residual_in is added and the
//      sum rounded once, then device/epilogue.cuh finishTile (the canonical row reduction).
// Every rank of every host therefore rounds the same fp32 values: outputs are bitwise equal.
//
// Reuse without parity: rank r rewrites `in` at its next call's phase 1 only after its phase 2 of
// this call completed, whose barrier needed every local peer to have started phase 2, i.e. finished
// phase 1 (its reads of `in`). Rank r's slice is rewritten by its next phase 1 after that call's
// barrier, which needs every local peer to have started the next phase 1, i.e. finished phase 2
// (its reads of the slices). A failed or refused call writes NaN into its slice and outputs (the
// NCCL all-reduce still runs, so the ranks of other hosts never wait for it; they get NaN rows).
#pragma once

#include "algos/hierarchical/args.h"
#include "device/epilogue.cuh"
#include "device/exchange.cuh"

namespace arfuse {

template <typename T>
__global__ void __launch_bounds__(256) hierReduceScatterKernel(const __grid_constant__ HierArgs h) {
  constexpr int E = Vec<T>::kElems;
  const KernelArgs& a = h.k;
  const uint4* x = reinterpret_cast<const uint4*>(a.x);  // [count / E]
  const long long total = h.count / E;                   // vectors of the message
  const long long sliceVecs = h.sliceElems / E;          // vectors of one slice
  const HierCut cut = hierCtaCut(sliceVecs, gridDim.x, blockIdx.x);
  const long long v0 = cut.first, v1 = cut.last;
  CallState cs = enterCall(a);  // before pdlWait: device/protocol.cuh
  pdlWait();
  const EntryCheck check = issueEntryCheck(a, cs);
  const bool go = cs.status == kFlightOk;
  uint4* mineIn = reinterpret_cast<uint4*>(h.in[a.rank]);  // [count / E], the layout of x
  for (int j = 0; go && j < a.nranks; ++j) {
    if (j == a.rank) continue;
    for (long long v = v0 + threadIdx.x; v < v1; v += blockDim.x) {
      const long long g = j * sliceVecs + v;  // vector of the message
      if (g < total) mineIn[g] = x[g];
    }
  }
  const bool ok = settleEntry(a, &cs, check) && ctaBarrier<PeerExchange>(a, cs.epoch, /*phase=*/0);
  float* out = h.slices[a.rank];  // [sliceElems]
  for (long long v = v0 + threadIdx.x; v < v1; v += blockDim.x) {
    const long long g = static_cast<long long>(a.rank) * sliceVecs + v;
    float acc[E];
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = ok ? 0.f : __int_as_float(0x7FC00000);
    if (ok && g < total) {
      for (int q = 0; q < a.nranks; ++q) {  // local-rank order
        const uint4 u = q == a.rank ? x[g] : loadL2(h.in[q] + g * 16);
        float f[E];
        Vec<T>::toFloat(u, f);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] += f[e];
      }
    }
    uint4* o = reinterpret_cast<uint4*>(out + v * E);  // E / 4 fp32 vectors
#pragma unroll
    for (int k = 0; k < E / 4; ++k)
      o[k] = make_uint4(__float_as_uint(acc[4 * k]), __float_as_uint(acc[4 * k + 1]), __float_as_uint(acc[4 * k + 2]),
                        __float_as_uint(acc[4 * k + 3]));
  }
  exitCall(a, cs, !ok);
}

template <typename T, bool kFused, int kVecs>
__global__ void __launch_bounds__(barrierMaxThreads(kVecs)) hierGatherKernel(const __grid_constant__ HierArgs h) {
  constexpr int E = Vec<T>::kElems;
  const KernelArgs& a = h.k;
  __shared__ RowScratch sm;
  const TileCursor tc(a);  // chunks == 1: whole rows
  const int V = tc.chunkVecs;
  const uint4* residualIn = reinterpret_cast<const uint4*>(a.residualIn);  // [tokens, nvec]
  pdlWait();
  WeightCache<kVecs> w;
  if (kFused) w.load(reinterpret_cast<const uint4*>(a.weight), 0, V);
  // Entered after pdlWait, in one part: this kernel follows an NCCL all-reduce, whose time dwarfs
  // the round trip, and the two-part entry made its fused variants spill. (Mixing is sound: a
  // kernel that enters after its wait sees no earlier call's mark, so any other mark is concurrent.)
  const CallState cs = enterCall</*kAfterWait=*/true>(a);
  const bool go = cs.status == kFlightOk;
  // This rank's NCCL all-reduce wrote slices[rank] in an earlier kernel: fence before the flag.
  if (go && threadIdx.x < a.nranks) __threadfence_system();
  const bool ok = go && ctaBarrier<PeerExchange>(a, cs.epoch, /*phase=*/0);
  pdlLaunchDependents();
  for (int j = 0; j < tc.tiles; ++j) {
    uint4 packed[kVecs] = {};
    forThreadVecs<kVecs>(V, [&](int i, int u) {
      float acc[E];
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] = 0.f;
      if (ok) {
        const long long e0 = static_cast<long long>(tc.at(j, u)) * E;  // first element of the vector
        const float* src = h.slices[hierOwner(e0, h.sliceElems)] + hierOffset(e0, h.sliceElems);
#pragma unroll
        for (int k = 0; k < E / 4; ++k) {
          const uint4 f = loadL2(src + 4 * k);
          acc[4 * k] = __uint_as_float(f.x);
          acc[4 * k + 1] = __uint_as_float(f.y);
          acc[4 * k + 2] = __uint_as_float(f.z);
          acc[4 * k + 3] = __uint_as_float(f.w);
        }
      }
      uint4 r;
      if (kFused) r = residualIn[tc.at(j, u)];
      packed[i] = roundSum<T>(acc, kFused ? &r : nullptr, !ok);
    });
    finishTile<T, kFused, kVecs, false>(a, tc, j, packed, !ok, w, &sm);
  }
  exitCall(a, cs, !ok);
}

}  // namespace arfuse
