// Low-latency all-reduce (+ fused residual add and RMSNorm) for small messages.
//
// Readiness travels inside the data, as in NCCL's LL protocol: every 4 data bytes are sent as one
// 8-byte word {flag:32 | data:32}, and an aligned 8-byte store is single-copy atomic, so a reader
// that sees this call's flag in a word has that word's data. There is no separate barrier and no
// remote read: each rank *pushes* its tiles into every peer's buffer (posted writes, one one-way
// trip) and then polls only its own memory. No 16-byte atomicity and no sentinel value is assumed.
//
// Per call, CTA b (tiles as in device/args.h Tiling; a row may be split over a cluster of CTAs):
//   0. enterCall before pdlWait (device/protocol.cuh: the entry atomic overlaps the previous
//      kernel's tail); after it, this thread's x and weight loads and the entry check are issued;
//      a refused call writes NaN and leaves;
//   1. send: the CTA's descriptor, then every tile's x vectors, to region [b][parity][me] of every
//      peer's buffer. Layout per 32 consecutive vectors (1 KiB): the 32 first halves (words x, y),
//      then the 32 second halves (z, w), so each warp-wide 16-byte store writes 512 contiguous
//      bytes (whole sectors, coalesced);
//   2. receive: each thread polls its vector from every peer at once (all loads in flight, re-issued
//      only for the peers not there yet), then sums all ranks in rank order (own part from x);
//      the descriptor of each peer (its own flagged slot) is checked before any output is written;
//   3. the shared epilogue (device/epilogue.cuh), whose canonical row reduction makes the bits the
//      same as every other path's.
// Two-phase variant (kTwoPhase; Plan.variant), for messages where pushing the whole message
// to every peer costs more than a second one-way trip: vector u of a tile is owned by rank
// u * n / V (contiguous slices of the tile, at least one vector each since V >= n). Phase 1 sends
// each vector only to its owner; the owner sums it over all ranks in rank order (fp32), adds the
// residual, rounds once, and phase 2 pushes that rounded value to every peer, which takes it for the
// vectors it does not own. Each rank sends and receives 2 (n-1)/n of the message instead of (n-1)x.
// Both phases use the same regions: in region [b][p][s] of rank R, phase 1 (from s) fills the
// offsets of vectors R owns, phase 2 (from owner s) the offsets of vectors s owns -- disjoint, so
// one flag per call serves both. The bits equal the one-phase kernel's: the same sum in the same
// order, the same rounding, the same epilogue. The reuse argument below holds as is: every CTA
// still waits on data from every peer in every call (phase 1 from all, as an owner).
// Flags: llFlag(epoch) in 1..2^32-1; a CTA's epochs increase, so a word left from an earlier call of
// this CTA index carries another flag and is never taken.
// Reuse: CTA b of a sender writes parity p again at its epoch e+2 only after its epoch e+1 finished,
// which waited for data every peer's CTA b sent at e+1 -- sent only after that peer's CTA b had
// finished e, its last reader of parity p. Every path waits on every peer, so this holds across
// changes of path too.
#pragma once

#include "device/epilogue.cuh"
#include "device/phase_clock.cuh"

namespace arfuse {
namespace ll {

// Offset of vector u of tile j in a flagged region (device/args.h llTileBytes: whole 1 KiB groups).
__device__ __forceinline__ size_t vecOffset(int chunkVecs, int j, int u) {
  return static_cast<size_t>(j) * llTileBytes(chunkVecs) + static_cast<size_t>(u >> 5) * 1024 + (u & 31) * 16;
}
// Region [this CTA][parity][src] of `owner`'s buffer.
__device__ __forceinline__ char* region(const KernelArgs& a, int owner, int parity, int src) {
  return a.peers.ll[owner] + ((static_cast<size_t>(blockIdx.x) * 2 + parity) * a.nranks + src) * kLlRegionBytes;
}
__device__ __forceinline__ void store(char* at, uint4 d, uint32_t flag) {
  storeVolatile2(at, flagWord(flag, d.x), flagWord(flag, d.y));
  storeVolatile2(at + 512, flagWord(flag, d.z), flagWord(flag, d.w));
}

// Every warp checks every peer's descriptor of this call: lane r loads rank r's flagged slot (the
// peer sent it before its data) together with the first data polls (issueDescProbe) and settles it
// after them (settleDescProbe), so the check costs no round trip of its own; the verdict is
// warp-uniform without a CTA barrier, and no warp writes an output of a divergent call.
struct DescProbe {
  uint64_t w0 = 0, w1 = 0;
};
__device__ __forceinline__ const FlagSlot* descSlotOf(const KernelArgs& a, int parity, int r) {
  return &a.peers.control[a.rank]->llDesc[parity][blockIdx.x][r];
}
__device__ __forceinline__ DescProbe issueDescProbe(const KernelArgs& a, int parity) {
  DescProbe p;
  const int r = threadIdx.x & 31;
  if (r < a.nranks && r != a.rank) loadVolatile2(descSlotOf(a, parity, r)->w, &p.w0, &p.w1);
  return p;
}
// False on a mismatch or a failed wait (uniform across the warp).
__device__ __forceinline__ bool settleDescProbe(const KernelArgs& a, int parity, uint32_t flag, uint64_t epoch,
                                                DescProbe p) {
  const int r = threadIdx.x & 31;
  bool ok = true;
  if (r < a.nranks && r != a.rank) {
    Spin spin;
    while (wordCounter(p.w0) != flag || wordCounter(p.w1) != flag) {
      if (!spin.keepGoing(a, r, /*phase=*/3, epoch)) {
        ok = false;
        break;
      }
      loadVolatile2(descSlotOf(a, parity, r)->w, &p.w0, &p.w1);
    }
    if (ok) {
      const CallDesc theirs{wordPayload(p.w0), wordPayload(p.w1)};
      if (theirs.w0 != a.desc.w0 || theirs.w1 != a.desc.w1) {
        raiseError(a, kErrMismatch, r, /*phase=*/3, epoch, theirs);
        ok = false;
      }
    }
  }
  return __all_sync(0xffffffffu, ok) != 0;
}

__device__ __forceinline__ bool wordsCarry(const uint64_t (&w)[4], uint32_t flag) {
  return wordCounter(w[0]) == flag && wordCounter(w[1]) == flag && wordCounter(w[2]) == flag &&
         wordCounter(w[3]) == flag;
}

// The fp32 sum in rank order of one vector: `own` for this rank, the peers' from this rank's buffer
// at `offset` of their regions, polled 8 peers at a time with every load in flight. False if a wait
// failed (acc is then meaningless).
template <typename T>
__device__ __forceinline__ bool receiveSum(const KernelArgs& a, int parity, uint32_t flag, size_t offset,
                                           const uint4& own, float* acc, uint64_t epoch) {
  constexpr int E = Vec<T>::kElems;
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = 0.f;
  bool ok = true;
  // Sources of one [cta][parity] are consecutive regions: one base pointer serves every peer.
  const char* base = region(a, a.rank, parity, 0) + offset;
  for (int r0 = 0; r0 < a.nranks; r0 += 8) {
    uint64_t w[8][4];
    uint32_t pending = 0;
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const int r = r0 + s;
      w[s][0] = w[s][1] = w[s][2] = w[s][3] = 0;
      if (r < a.nranks && r != a.rank) {
        const char* p = base + static_cast<size_t>(r) * kLlRegionBytes;
        loadVolatile2(p, &w[s][0], &w[s][1]);
        loadVolatile2(p + 512, &w[s][2], &w[s][3]);
        pending |= 1u << s;
      }
    }
    Spin spin;
    while (ok && pending) {
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        if (pending & (1u << s)) {
          if (wordsCarry(w[s], flag)) {
            pending &= ~(1u << s);
          } else {
            const char* p = base + static_cast<size_t>(r0 + s) * kLlRegionBytes;
            loadVolatile2(p, &w[s][0], &w[s][1]);
            loadVolatile2(p + 512, &w[s][2], &w[s][3]);
          }
        }
      }
      if (pending && !spin.keepGoing(a, r0 + __ffs(pending) - 1, /*phase=*/2, epoch)) ok = false;
      if (pending && a.pollSleepNs && spin.polls > 4) __nanosleep(a.pollSleepNs);
    }
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const int r = r0 + s;
      if (r < a.nranks) {
        const uint4 d = r == a.rank ? own
                                    : make_uint4(wordPayload(w[s][0]), wordPayload(w[s][1]), wordPayload(w[s][2]),
                                                 wordPayload(w[s][3]));
        float f[E];
        Vec<T>::toFloat(d, f);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] += f[e];
      }
    }
  }
  return ok;
}

// Rank owning vector u of a tile of V vectors in the two-phase variant (contiguous slices).
__device__ __forceinline__ int ownerOf(int u, int V, int n) { return (u * n) / V; }

// Phase 2 of the two-phase variant: the rounded vector at `offset` that `owner` pushed into this
// rank's buffer. False if the wait failed.
__device__ __forceinline__ bool receiveReduced(const KernelArgs& a, int parity, uint32_t flag, size_t offset, int owner,
                                               uint4* out, uint64_t epoch) {
  const char* p = region(a, a.rank, parity, owner) + offset;
  uint64_t w[4];
  loadVolatile2(p, &w[0], &w[1]);
  loadVolatile2(p + 512, &w[2], &w[3]);
  Spin spin;
  while (!wordsCarry(w, flag)) {
    if (!spin.keepGoing(a, owner, /*phase=*/2, epoch)) return false;
    if (a.pollSleepNs && spin.polls > 4) __nanosleep(a.pollSleepNs);
    loadVolatile2(p, &w[0], &w[1]);
    loadVolatile2(p + 512, &w[2], &w[3]);
  }
  *out = make_uint4(wordPayload(w[0]), wordPayload(w[1]), wordPayload(w[2]), wordPayload(w[3]));
  return true;
}

}  // namespace ll

// At most 256 threads (a tile of up to 512 vectors takes 2 per thread): the receive keeps 8 peers'
// flagged vectors in flight, 64 registers, which the 128-register budget of 512 threads cannot hold.
constexpr int kLlMaxThreads = 256;
// Resident CTAs per SM stated to ptxas (the launch bound's minimum; 1: a 255-register budget, the
// residency the caps are measured against), as in device/exchange.cuh barrierStatesResidency: on sm_90
// only by the row-push variants; the others keep ptxas's own register target, which spilled none of
// them, and so e7608fe's machine code. Off sm_90 by every kernel (checked spill-free there, change 26).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ != 900
constexpr int llMinBlocks(bool) { return 1; }
#else
constexpr int llMinBlocks(bool push) { return push ? 1 : 0; }
#endif

// kPush: the row push (device/rowsum.cuh), the instantiation for split rows of fused calls.
template <typename T, bool kFused, int kVecs, bool kExt = false, bool kTwoPhase = false, bool kPush = false>
__global__ void __launch_bounds__(kLlMaxThreads, llMinBlocks(kPush))
    lowLatencyKernel(const __grid_constant__ KernelArgs a) {
  constexpr int E = Vec<T>::kElems;
  __shared__ RowScratchOf<kPush> sm;
  const TileCursor tc(a);
  const int V = tc.chunkVecs;
  const uint4* x = reinterpret_cast<const uint4*>(a.x);  // [tokens, nvec]
  // Phase points (device/phase_clock.cuh): 0 start, 1 entered (before the wait), 2 after pdlWait,
  // 3 sent, 4 tile 0 received, 5 tiles finished, 6 exited; the finish stamps its own sub-points
  // (phase_clock.cuh kSub*).
  // A refused call (cs.status) sends nothing and waits for nothing, but still runs the tile loop with
  // NaN so that the CTAs of a split row pass the same cluster barriers (a CTA of the cluster may not
  // have been refused) and every output element it owns becomes NaN.
  if constexpr (kPush) rowPushInit(a.tiling.chunks > 1, &sm);
  CallState cs = enterThenWait(a);  // device/protocol.cuh
  const EntryCheck check = issueEntryCheck(a, cs);
  uint4 own[kVecs];  // tile 0's x
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int u = threadIdx.x + i * blockDim.x;
    own[i] = u < V ? x[tc.at(0, u)] : make_uint4(0, 0, 0, 0);
  }
  WeightCache<kVecs> w;
  if (kFused && !kExt) w.load(reinterpret_cast<const uint4*>(a.weight), tc.chunk * V, V);
  bool go = cs.status == kFlightOk;
  const int parity = static_cast<int>(cs.epoch & 1);
  const uint32_t flag = llFlag(cs.epoch);

  // 1. send: descriptor, then every tile (reads of x precede every store of norm_out, which may alias it).
  if (go && threadIdx.x < a.nranks && threadIdx.x != a.rank)
    storeVolatile2(a.peers.control[threadIdx.x]->llDesc[parity][blockIdx.x][a.rank].w, flagWord(flag, a.desc.w0),
                   flagWord(flag, a.desc.w1));
  for (int j = 0; go && j < tc.tiles; ++j) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int u = threadIdx.x + i * blockDim.x;
      if (u >= V) continue;
      const uint4 d = j == 0 ? own[i] : x[tc.at(j, u)];
      const size_t off = ll::vecOffset(V, j, u);
      if constexpr (kTwoPhase) {  // phase 1: to the vector's owner only
        const int o = ll::ownerOf(u, V, a.nranks);
        if (o != a.rank) ll::store(ll::region(a, o, parity, a.rank) + off, d, flag);
      } else {
        for (int p = 0; p < a.nranks; ++p)
          if (p != a.rank) ll::store(ll::region(a, p, parity, a.rank) + off, d, flag);
      }
    }
  }

  // The entry check settles here, after the sends it overlapped (a call it stops has sent its data,
  // but stores no output: device/protocol.cuh).
  go = settleEntry(a, &cs, check);
  PhaseClock::mark<3>();
  // 2. receive, reduce, finish each tile.
  const ll::DescProbe probe = go ? ll::issueDescProbe(a, parity) : ll::DescProbe{};
  bool descOk = go, descSettled = !go;
  bool failed = !go;
  const uint4* residualIn = reinterpret_cast<const uint4*>(a.residualIn);
  if constexpr (kTwoPhase) {
    // Settled before any data wait: with divergent calls the slices' owners may differ, and a wait
    // for a slice nobody sends would end in a timeout instead of the mismatch. The descriptors
    // travel before the data, so this costs little more than the data wait would.
    descSettled = true;
    if (go) descOk = ll::settleDescProbe(a, parity, flag, cs.epoch, probe);
    failed = failed || !descOk;
  }
  for (int j = 0; j < tc.tiles; ++j) {
    const bool addResidual = kFused && !(kExt && a.ext.firstLayer);
    ResidualCache<kVecs> res;
    if (addResidual) res.load(residualIn + tc.at(j, 0), V);
    uint4 packed[kVecs];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) packed[i] = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int u = threadIdx.x + i * blockDim.x;
      if (u >= V || (kTwoPhase && ll::ownerOf(u, V, a.nranks) != a.rank)) continue;
      float acc[E];
      const uint4 mine = j == 0 ? own[i] : x[tc.at(j, u)];
      const size_t off = ll::vecOffset(V, j, u);
      const bool ok = descOk && ll::receiveSum<T>(a, parity, flag, off, mine, acc, cs.epoch);
      failed = failed || !ok;
      packed[i] = roundSum<T>(acc, addResidual ? &res.r[i] : nullptr, !ok);
      if constexpr (kTwoPhase) {  // phase 2: the owner pushes the rounded value (NaN if it failed)
        if (descOk)
          for (int p = 0; p < a.nranks; ++p)
            if (p != a.rank) ll::store(ll::region(a, p, parity, a.rank) + off, packed[i], flag);
      }
    }
    if constexpr (kTwoPhase) {  // the vectors other ranks own: their rounded values
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int u = threadIdx.x + i * blockDim.x;
        if (u >= V) continue;
        const int o = ll::ownerOf(u, V, a.nranks);
        if (o == a.rank) continue;
        const bool ok = descOk && ll::receiveReduced(a, parity, flag, ll::vecOffset(V, j, u), o, &packed[i], cs.epoch);
        failed = failed || !ok;
        if (!ok) packed[i] = nanVec<T>();
      }
    }
    if (!descSettled) {  // after the first tile's data: the descriptors came first
      descSettled = true;
      descOk = ll::settleDescProbe(a, parity, flag, cs.epoch, probe);
      if (!descOk) {
        failed = true;
#pragma unroll
        for (int i = 0; i < kVecs; ++i) packed[i] = nanVec<T>();
      }
    }
    if (j == 0) PhaseClock::mark<4>();
    if (j == tc.tiles - 1) pdlLaunchDependents();
    bool anyFail = false;
    if constexpr (kExt) anyFail = __syncthreads_or(failed) != 0;
    finishTile<T, kFused, kVecs, kExt, kPush>(a, tc, j, packed, anyFail, w, &sm);
  }
  PhaseClock::mark<5>();
  exitCall(a, cs, __syncthreads_or(failed) != 0);
  PhaseClock::mark<6>();
  PhaseClock::report("lowlatency", a.nranks, a.rank, cs.epoch, 7);
}

}  // namespace arfuse
