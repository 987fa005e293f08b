// The canonical sum of squares of a row: the same bits for the same row whatever the launch
// geometry, the path, the number of tokens in the call or the number of CTAs the row is split over.
//
// Definition (over the row's 16-byte vectors v = 0 .. nvec-1, E elements each, values r):
//   q(v)   = sum over e = 0..E-1 of r_e^2, in element order (fmaf chain from 0);
//   s(g)   = butterfly over the kGroupVecs = 8 vectors of group g (xor 1, then 2, then 4);
//   total  = lane l (0..31) sums s(l), s(l + 32), s(l + 64), ... in that order, then a butterfly
//            over the 32 lanes (xor 16, 8, 4, 2, 1).
// Every operand of every addition is fixed by the row alone, and a butterfly gives the same bits in
// every lane (each step adds the same two values in either order). A thread's vectors are
// u = threadIdx.x + i * blockDim.x (blockDim a multiple of 32), so the 8 vectors of a group sit in 8
// consecutive lanes of one warp, and a chunk of a split row starts on a group boundary.
//
// Split rows (chunks > 1, a cluster): each CTA publishes s(g) of its groups in its shared memory;
// after a cluster barrier, warp 0 of every CTA reads all s(g) (its own locally, the others' through
// distributed shared memory) in the order above. A second cluster barrier (arrive now, wait in
// releaseRow) keeps every CTA's shared memory alive until all have read it.
// Row push (kPush, the split-row instantiations of the fused kernels; docs/perf.md changes 27-28): instead
// of the first barrier and the remote loads, every CTA stores its s(g) into the shared memory of every
// CTA of the cluster (st.async, completing on that CTA's mbarrier) and waits only for its own mbarrier,
// then reads every s(g) locally in the same order: the same bits, one one-way trip instead of a
// barrier (whose release also waits for the CTA's earlier stores, the low-latency sends) and a round
// trip. The second barrier stays between tiles: the next tile's pushes overwrite what the others
// read. After the last tile it goes (`lastTile`): no CTA reads another's shared memory, and every
// push into a CTA landed before that CTA's own wait returned, so none can reach a CTA that exited.
#pragma once

#include <type_traits>

#include "device/args.h"
#include "device/memory.cuh"
#include "device/phase_clock.cuh"

namespace arfuse {

struct RowScratch {
  float groups[kMaxGroupsPerRow];
  float total;
};
// The row push's scratch (kPush kernels only, so that the others keep RowScratch's layout and code).
struct RowPushScratch : RowScratch {
  uint64_t bar;  // counts the bytes of the other CTAs' group sums (memory.cuh mbarrier*)
  int pushed;    // tiles whose sums this CTA received (the mbarrier's completed phases)
};
template <bool kPush>
using RowScratchOf = std::conditional_t<kPush, RowPushScratch, RowScratch>;

// At kernel start, by every thread of a kPush kernel (`on`: the row is split, uniform across the
// cluster): the mbarrier, and a cluster arrival that canonicalRowSquares waits for before its first
// push (every CTA's mbarrier is then initialised); by then that wait costs nothing.
__device__ __forceinline__ void rowPushInit(bool on, RowPushScratch* sm) {
  if (!on) return;
  if (threadIdx.x == 0) {
    mbarrierInit(&sm->bar, 1);
    sm->pushed = 0;
  }
  clusterArriveRelease();
}

// q[i]: this thread's q(u_i) (0 for u_i >= chunkVecs; NaN if the tile failed, which then makes the
// whole row's total NaN in every CTA of the row). Returns the row's total in every thread.
// kOneLoad (the single-GPU kernel, 512 threads): warp 0 reads one group sum at a time. The batch
// below takes registers (94 instead of 64 for add+RMSNorm bf16 at 2 vectors per thread: one CTA per
// SM instead of two, 256 x 7168 tokens 5.72 -> 7.00 us on the H200), and a CTA-local row's shared
// memory answers fast enough that one load at a time costs little. Same order, same bits.
// kPush: sm is a RowPushScratch and rowPushInit ran at kernel start; a whole row (chunks == 1) takes
// the CTA-local path either way.
// lastTile: the CTA's last tile of the call (uniform across the cluster: its CTAs share their rows);
// a pushed row then skips the arrival that releaseRow would wait for.
template <int kVecs, bool kOneLoad = false, bool kPush = false>
__device__ __forceinline__ float canonicalRowSquares(const float (&q)[kVecs], int chunk, int chunks, int chunkVecs,
                                                     int nvec, RowScratch* sm, bool lastTile = false) {
  if constexpr (!kClustersBuilt) {
    // Below sm_90 no row is split (plan.h `clusters`: a cluster launch fails there), so the split-row
    // code below is not built for those architectures, where it only took registers (sm_80's one-shot
    // fused 2-vector push variants spilled 8 bytes with it); a split row would stop here, as loudly as
    // the cluster instructions it would have reached.
    if (chunks > 1) __trap();
    chunk = 0, chunks = 1;
  }
  const int lane = threadIdx.x & 31;
  RowPushScratch* const ps = kPush ? static_cast<RowPushScratch*>(sm) : nullptr;
  const bool push = kPush && chunks > 1;
  const int pushed = push ? ps->pushed : 0;
  if (push && pushed == 0) clusterWaitAcquire();  // every CTA's mbarrier is initialised (rowPushInit)
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    if (i * static_cast<int>(blockDim.x) >= chunkVecs) break;  // uniform
    const int u = threadIdx.x + i * blockDim.x;
    float s = q[i];
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    s += __shfl_xor_sync(0xffffffffu, s, 4);
    if ((lane & (kGroupVecs - 1)) == 0 && u < chunkVecs) {
      float* const g = &sm->groups[(chunk * chunkVecs + u) / kGroupVecs];
      *g = s;
      if (push)
        for (int k = 0; k < chunks; ++k)
          if (k != chunk) pushClusterShared(g, &ps->bar, static_cast<uint32_t>(k), s);
    }
  }
  PhaseClock::mark<kSubPushed>();
  if (push) {
    // The other CTAs' groups of the row, 4 bytes each.
    if (threadIdx.x == 0)
      mbarrierArriveExpectTx(&ps->bar, static_cast<uint32_t>((nvec - chunkVecs) / kGroupVecs * sizeof(float)));
    __syncthreads();  // this CTA's own groups
    if (threadIdx.x < 32) mbarrierWaitParity(&ps->bar, static_cast<uint32_t>(pushed & 1));
  } else if (chunks == 1) {
    __syncthreads();
  } else {
    clusterArriveRelease();
    clusterWaitAcquire();
  }
  PhaseClock::mark<kSubRowWait>();
  if (threadIdx.x < 32) {
    const int groups = (nvec + kGroupVecs - 1) / kGroupVecs;
    const int perChunk = chunkVecs / kGroupVecs;
    float acc = 0.f;
    if constexpr (kOneLoad) {
      for (int g = lane; g < groups; g += 32) {
        const int owner = chunks == 1 ? 0 : g / perChunk;
        acc += owner == chunk ? sm->groups[g] : loadClusterShared(&sm->groups[g], static_cast<uint32_t>(owner));
      }
    } else if (push) {
      // Every group was pushed into this CTA's shared memory: plain shared loads, four in flight per
      // lane, with no owner to work out per group. (Through the owner test below, each load took an
      // integer division and a generic load, docs/perf.md change 33. That loop stays as it was for
      // the other rows: with a third branch the non-push 8-vector two-shot variants spilled.)
      constexpr int kBatch = 4;
      for (int g0 = lane; g0 < groups; g0 += kBatch * 32) {
        float s[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) s[k] = g0 + 32 * k < groups ? sm->groups[g0 + 32 * k] : 0.f;
#pragma unroll
        for (int k = 0; k < kBatch; ++k)
          if (g0 + 32 * k < groups) acc += s[k];
      }
    } else {
      // Four loads in flight per lane before they are added (in the order above): one at a time, each
      // distributed-shared-memory round trip of a split row waited for the previous one.
      constexpr int kBatch = 4;
      for (int g0 = lane; g0 < groups; g0 += kBatch * 32) {
        float s[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          const int g = g0 + 32 * k;
          s[k] = 0.f;
          if (g < groups) {
            const int owner = chunks == 1 ? 0 : g / perChunk;
            s[k] = owner == chunk ? sm->groups[g] : loadClusterShared(&sm->groups[g], static_cast<uint32_t>(owner));
          }
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k)
          if (g0 + 32 * k < groups) acc += s[k];
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) sm->total = acc;
  }
  // Split rows: arrive once this CTA's shared memory is read (warp 0 arrives last); releaseRow waits
  // for every CTA's arrival before the scratch is written again (next tile) or the CTA exits. A pushed
  // row's last tile needs neither (see the top of this file).
  if (chunks > 1 && !(push && lastTile)) clusterArrive();
  if (push && threadIdx.x == 0) ps->pushed = pushed + 1;
  __syncthreads();
  PhaseClock::mark<kSubRowTotal>();
  return sm->total;
}

// Before this CTA's shared scratch is written again (next row) or the CTA exits: with a cluster,
// every CTA of the row has read it. (Within one CTA the last __syncthreads of canonicalRowSquares
// already orders warp 0's reads before any later write.) `pushedLast`: a pushed row's last tile,
// whose canonicalRowSquares did not arrive.
__device__ inline void releaseRow(int chunks, bool pushedLast = false) {
  if (chunks > 1 && !pushedLast) clusterWait();
}

// q(v) of one vector (as fp32 values).
template <int E>
__device__ __forceinline__ float vectorSquares(const float* r) {
  float q = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) q = fmaf(r[e], r[e], q);
  return q;
}

}  // namespace arfuse
