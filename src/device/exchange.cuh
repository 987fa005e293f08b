// Where the barrier paths (one-shot, two-shot) put a CTA's tiles for their peers, how they read a
// peer's, and where the per-CTA barrier flags live: over peer access (PeerExchange) or through the
// group's pinned host area (HostExchange). The one-shot and two-shot kernels are written once over
// this interface; the host-staged path is those kernels over HostExchange.
//
// Regions: CTA b of rank r owns region [b][parity] of its exchange buffer (device staging for peer
// access, its host slot otherwise); its j-th tile sits at j * chunkVecs * 16 B.
#pragma once

#include "device/args.h"
#include "device/memory.cuh"
#include "device/vec.cuh"

namespace arfuse {

// Threads of a one-shot / two-shot CTA: the 1- and 2-vector instantiations (tiles up to 512 vectors,
// the latency-bound calls) run at most 256 threads, so their loads in flight (8 ranks x 16 B) and
// register caches fit without spilling; the wide ones (whole rows of more than 512 vectors) 512: the
// 8-vector ones (up to 4096 vectors) and the wide 2-vector ones (`wide`: up to 1024 vectors, hidden
// 4104-8192 in 16-bit types, which would use 2 of the 8-vector kernels' 8 vector slots).
__host__ __device__ constexpr int barrierMaxThreads(int vecs, bool wide = false) {
  return vecs <= 2 && !wide ? 256 : kMaxThreads;
}
// CTAs of that size one SM must hold (the residency the virtual-rank caps are measured against): two
// narrow ones (128 registers each), one wide one. A kernel that states it (the launch bound's minimum;
// barrierStatesResidency) gets this register budget from ptxas; one that does not (0) gets ptxas's own
// register target, which may be lower.
__host__ __device__ constexpr int barrierMinBlocks(int vecs, bool stated, bool wide = false) {
  return !stated ? 0 : vecs <= 2 && !wide ? 2 : 1;
}

// Which barrier kernels state it (`spilled`: the kernel's own list of its variants that ptxas's own
// target spilled in the e7608fe build, sm_90; `push`: a row-push variant). On sm_90 every other kernel
// keeps that target and with it e7608fe's machine code, byte for byte (scripts/sass_hashes.py): stating
// the minimum reschedules a kernel even where it spilled nothing, and phase 1 of issue 33, which stated
// it everywhere, was slower at every size (docs/perf.md change 28). The row-push variants state it
// because their registers also bound the narrow class's residency. Off sm_90 every kernel states it:
// the configuration change 26 checked spill-free there, and no such GPU was there to measure what
// ptxas's own target would gain. cpu_kernels_no_spills checks the result on every architecture built.
__host__ __device__ constexpr bool barrierStatesResidency(bool spilled, bool push) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ != 900
  return true;
#else
  return spilled || push;
#endif
}

struct PeerExchange {
  __device__ static char* region(const KernelArgs& a, int rank, int parity) {
    return a.peers.staging[rank] + (static_cast<size_t>(blockIdx.x) * 2 + parity) * a.stagingRegionBytes;
  }
  __device__ static FlagSlot* slot(const KernelArgs& a, int owner, int src) {
    return &a.peers.control[owner]->flags[blockIdx.x][src];
  }
  __device__ static uint4 load(const char* p) { return loadL2(p); }
  // A rank's own reduced slice (two-shot) is read back from its own region.
  static constexpr bool kRegionIsLocal = true;
};

struct HostExchange {
  __device__ static char* region(const KernelArgs& a, int rank, int parity) {
    return a.host.slots[rank] + (static_cast<size_t>(blockIdx.x) * 2 + parity) * a.hostRegionBytes;
  }
  __device__ static FlagSlot* slot(const KernelArgs& a, int owner, int src) {
    return a.host.flags[owner] + static_cast<size_t>(blockIdx.x) * kMaxRanks + src;
  }
  __device__ static uint4 load(const char* p) { return loadHost16(p); }
  // The host slot is remote memory: a rank keeps a device copy of its reduced slice in its own
  // staging region and gathers its own slice from there.
  static constexpr bool kRegionIsLocal = false;
};

// fp32 sum, in rank order 0..n-1, of one vector of every rank: this rank's is `own`, rank r's is
// load(r). Loads of up to kInFlight ranks are in flight before the additions, which still happen
// strictly in rank order (the bits every path and rank produce).
template <typename T, int kInFlight = 8, class Load>
__device__ __forceinline__ void sumRankOrder(int nranks, int rank, const uint4& own, Load&& load, float* acc) {
  constexpr int E = Vec<T>::kElems;
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = 0.f;
  for (int r0 = 0; r0 < nranks; r0 += kInFlight) {
    uint4 buf[kInFlight];
#pragma unroll
    for (int s = 0; s < kInFlight; ++s) {
      const int r = r0 + s;
      if (r < nranks) buf[s] = r == rank ? own : load(r);
    }
#pragma unroll
    for (int s = 0; s < kInFlight; ++s) {
      if (r0 + s < nranks) {
        float f[E];
        Vec<T>::toFloat(buf[s], f);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] += f[e];
      }
    }
  }
}

// The same over the exchange: the vector at byte `offset` of every rank's region (one-shot); this
// rank's own part is `own` (from x: never read back through the exchange).
template <class X, typename T, int kInFlight = 8>
__device__ __forceinline__ void sumRanks(const KernelArgs& a, int parity, size_t offset, const uint4& own, float* acc) {
  sumRankOrder<T, kInFlight>(
      a.nranks, a.rank, own, [&](int r) { return X::load(X::region(a, r, parity) + offset); }, acc);
}

// sumRankOrderPair's halves, for a caller that issues a pair's loads early (one-shot's lean variants
// load their next tile's during the current tile's finish). loadRankPairParts: slot k < n takes
// vector 0 of rank k, slot n + r vector 1 of rank r (only if `has1`), every slot from load(v, r).
template <int kInFlight, class Load>
__device__ __forceinline__ void loadRankPairParts(int n, bool has1, Load&& load, uint4 (&buf)[kInFlight]) {
#pragma unroll
  for (int k = 0; k < kInFlight; ++k) {
    const bool second = k >= n;
    const int r = second ? k - n : k;
    if (!second || (has1 && r < n)) buf[k] = load(second ? 1 : 0, r);
  }
}
// addRankPairParts: each vector's parts added in rank order from 0 (sumRankOrder's additions, so the
// same bits); done(v, acc) takes vector v's sum as soon as it is complete (v = 0, then 1 if has1). One
// accumulator serves both, so that the pair costs the registers of its loads and no second accumulator
// (the 128-register variants spilled with two).
template <typename T, int kInFlight, class Done>
__device__ __forceinline__ void addRankPairParts(int n, bool has1, const uint4 (&buf)[kInFlight], Done&& done) {
  constexpr int E = Vec<T>::kElems;
  float acc[E];
#pragma unroll
  for (int v = 0; v < 2; ++v) {
    if (v == 1 && !has1) break;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = 0.f;
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      if (k >= v * n && k < (v + 1) * n) {
        float f[E];
        Vec<T>::toFloat(buf[k], f);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] += f[e];
      }
    }
    done(v, acc);
  }
}

// sumRankOrder of two vectors of one thread at once, for 2 n <= kInFlight: load(v, r) is vector v's
// part from rank r (this rank's are own0 and own1; the second vector only if `has1`). All kInFlight
// loads are in flight before any is added: vector by vector, the second vector's loads were issued
// only after the first's were added, two round trips where one serves (docs/perf.md change 33).
template <typename T, int kInFlight = 8, class Load, class Done>
__device__ __forceinline__ void sumRankOrderPair(int nranks, int rank, const uint4& own0, const uint4& own1, bool has1,
                                                 Load&& load, Done&& done) {
  // loadRankPairParts's slots, written out with the own parts: through it and a lambda, two-shot's
  // lean kernels' SASS changed (scripts/sass_hashes.py), and no GPU call measured that.
  const int n = nranks;
  uint4 buf[kInFlight];
#pragma unroll
  for (int k = 0; k < kInFlight; ++k) {
    const bool second = k >= n;
    const int r = second ? k - n : k;
    if (!second || (has1 && r < n)) buf[k] = r == rank ? (second ? own1 : own0) : load(second ? 1 : 0, r);
  }
  addRankPairParts<T, kInFlight>(nranks, has1, buf, done);
}

// The same over the exchange (one-shot): the vectors at byte offsets off0 and off1 of every rank's
// region; this rank's own parts are own0 and own1 (from x).
template <class X, typename T, int kInFlight = 8, class Done>
__device__ __forceinline__ void sumRanksPair(const KernelArgs& a, int parity, size_t off0, size_t off1,
                                             const uint4& own0, const uint4& own1, bool has1, Done&& done) {
  sumRankOrderPair<T, kInFlight>(
      a.nranks, a.rank, own0, own1, has1,
      [&](int v, int r) { return X::load(X::region(a, r, parity) + (v ? off1 : off0)); }, done);
}

}  // namespace arfuse
