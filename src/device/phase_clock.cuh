// Phase timing, for attributing a call's time (docs/perf.md): configure with
// -DARFUSE_PHASE_TIMING=ON and thread 0 of CTA 0 of every multi-rank kernel stamps clock64() into
// shared memory at the kernel's fixed points, then prints the stamps of every 256th call of that CTA
// as one line (`arfuse-phase path=... nranks=... rank=... call=... ns=... cycles=t1-t0,t2-t0,...`;
// ns: %globaltimer from the first point to the last, which gives the SM clock rate),
// which scripts/phase_report.py averages. The points of each path are named in its kernel
// (`PhaseClock::mark<K>()` with K the point's index). Points 0-6 are the kernel's own; 7-11 are
// sub-points of its finish (kSub*, stamped by device/rowsum.cuh and epilogue.cuh; of the last tile
// when there are several; unstamped ones stay 0, which the report skips). In a normal build every
// member is empty: the kernels' SASS is the same as without the marks (checked with cuobjdump).
#pragma once

#include <cstdint>
#ifdef ARFUSE_PHASE_TIMING
#include <cstdio>
#endif

namespace arfuse {

// The finish's sub-points (see above).
constexpr int kSubSummed = 7;     // the (last) tile's sums are done (one-shot)
constexpr int kSubPushed = 8;     // q of the thread's vectors computed, the row push's stores issued
constexpr int kSubRowWait = 9;    // the row's partial sums are there (mbarrier, cluster barrier or CTA barrier)
constexpr int kSubRowTotal = 10;  // every thread holds the row's total
constexpr int kSubStored = 11;    // the norm computed and the tile's outputs stored (before releaseRow)

#ifdef ARFUSE_PHASE_TIMING
struct PhaseClock {
  static constexpr int kPoints = 12;
  __device__ static long long* stamps() {
    __shared__ long long s[kPoints];
    return s;
  }
  __device__ static unsigned long long* wall() {  // %globaltimer at each point (ns), for the clock rate
    __shared__ unsigned long long g[kPoints];
    return g;
  }
  template <int K>
  __device__ static void mark() {
    static_assert(K >= 0 && K < kPoints, "phase point out of range");
    if (threadIdx.x == 0) {
      if (K == 0)
        for (int k = 1; k < kPoints; ++k) stamps()[k] = 0;  // so that a point a call never reaches reads 0
      stamps()[K] = clock64();
      unsigned long long t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      wall()[K] = t;
    }
  }
  // `points`: how many were marked (0 .. points-1).
  __device__ static void report(const char* path, int nranks, int rank, uint64_t epoch, int points) {
    if (threadIdx.x != 0 || blockIdx.x != 0 || (epoch & 255) != 128) return;
    const long long* s = stamps();
    long long d[kPoints] = {};
    for (int k = 1; k < kPoints; ++k) d[k] = k < points || k >= kSubSummed ? (s[k] ? s[k] - s[0] : 0) : 0;
    const unsigned long long ns = wall()[points - 1] - wall()[0];
    printf(
        "arfuse-phase path=%s nranks=%d rank=%d call=%llu ns=%llu "
        "cycles=%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld\n",
        path, nranks, rank, static_cast<unsigned long long>(epoch + 1), ns, d[1], d[2], d[3], d[4], d[5], d[6], d[7],
        d[8], d[9], d[10], d[11]);
  }
};
#else
struct PhaseClock {
  template <int K>
  __device__ static void mark() {}
  __device__ static void report(const char*, int, int, uint64_t, int) {}
};
#endif

}  // namespace arfuse
