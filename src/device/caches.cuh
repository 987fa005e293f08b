// Per-thread register caches of a tile's inputs, used where registers allow (at most 2 vectors per
// thread): the small-tile kernels keep x and residual_in from before their barrier or wait, so their
// latency overlaps the peers'; the 8-vector variants read them where they are used instead (keeping
// them would spill at 512 threads x 8 vectors).
#pragma once

#include "device/vec.cuh"

namespace arfuse {

template <int kVecs>
struct InputCache {
  static constexpr bool kCached = kVecs <= 2;
  uint4 v[kCached ? kVecs : 1];
  const uint4* base;  // the tile's first vector
  __device__ void load(const uint4* tile, int chunkVecs) {
    base = tile;
    if constexpr (kCached) {
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int u = threadIdx.x + i * blockDim.x;
        v[i] = u < chunkVecs ? tile[u] : make_uint4(0, 0, 0, 0);  // defined everywhere: no stack copy
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
      return base[u];
    }
  }
};

}  // namespace arfuse
