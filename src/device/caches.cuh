// Per-thread register caches of a tile's inputs, used where registers allow (at most 2 vectors per
// thread): the small-tile kernels keep x, residual_in and the weight from before their barrier or
// wait, so their latency overlaps the peers'; the 8-vector variants read them where they are used
// instead (keeping them would spill at 512 threads x 8 vectors).
#pragma once

#include "device/vec.cuh"

namespace arfuse {

// A thread's vectors u = threadIdx.x + i * blockDim.x (i < kVecs, u < chunkVecs) of one tile, kept
// in registers (kCached: by default where kVecs <= 2) or read where they are used. kLdg: read through
// the read-only cache (the weight, which no call writes). Every element of the register array is
// defined (a conditionally uninitialised register array goes to the stack).
template <int kVecs, bool kLdg, bool kCache = (kVecs <= 2)>
struct TileCache {
  static constexpr bool kCached = kCache;
  uint4 v[kCached ? kVecs : 1];
  const uint4* base;  // the tile's first vector
  __device__ static uint4 read(const uint4* p) {
    if constexpr (kLdg)
      return __ldg(p);
    else
      return *p;
  }
  __device__ void load(const uint4* tile, int chunkVecs) {
    base = tile;
    if constexpr (kCached) {
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int u = threadIdx.x + i * blockDim.x;
        v[i] = u < chunkVecs ? read(base + u) : make_uint4(0, 0, 0, 0);
      }
    } else {
      (void)chunkVecs;
    }
  }
  __device__ uint4 get(int i, int u) const {
    if constexpr (kCached) {
      (void)u;
      return v[i];
    } else {
      (void)i;
      return read(base + u);
    }
  }
};

// x and residual_in of the small-tile kernels (kept from before their barrier or wait).
template <int kVecs>
using InputCache = TileCache<kVecs, false>;

// The weight of the thread's vectors, kept from before the wait where registers allow (every tile of
// a CTA is the same chunk of a row, so the same weight); the 8-vector variant reads it in pass 2
// through the read-only cache instead (keeping it would spill at 512 threads x 8 vectors), as does
// one-shot's lean 2-vector variant (kCache false: its next tile's parts take those registers).
template <int kVecs, bool kCache = (kVecs <= 2)>
struct WeightCache : TileCache<kVecs, true, kCache> {
  __device__ void load(const uint4* weight, int chunkBase, int chunkVecs) {
    TileCache<kVecs, true, kCache>::load(weight + chunkBase, chunkVecs);
  }
};

// The tile's residual_in vectors of this thread, always in registers (the low-latency kernel loads
// them tile by tile). Not a TileCache: without the base pointer its kernels' SASS is what it was.
template <int kVecs>
struct ResidualCache {
  uint4 r[kVecs];
  __device__ void load(const uint4* residualIn /* tile base */, int chunkVecs) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int u = threadIdx.x + i * blockDim.x;
      r[i] = u < chunkVecs ? residualIn[u] : make_uint4(0, 0, 0, 0);
    }
  }
};

}  // namespace arfuse
