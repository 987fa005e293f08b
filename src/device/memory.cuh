// Memory-ordering and memory-access primitives shared by every kernel, programmatic dependent
// launch and the thread-block-cluster helpers.
//
// - Flags: system-scope release stores to peers and acquire loads of our own memory. A rank never
//   polls remote memory: it polls only what its peers write into its own workspace (a local read),
//   which matters over PCIe where every remote read is a non-posted round trip.
// - Flagged 8-byte words ({counter:32 | payload:32}) are written and read as 16-byte vectors of two
//   such words; each 8-byte element is single-copy atomic (never the 16 bytes as a whole).
// - Programmatic dependent launch (sm_90+): pdlWait() before touching anything the previous kernel
//   of the stream writes; pdlLaunchDependents() once this kernel no longer needs its SMs to itself.
//   On older architectures (launched without the attribute) both are no-ops.
// - Clusters (sm_90+): the CTAs of a split row exchange partial sums through distributed shared
//   memory; callers only take these branches when the launch used clusters (chunks > 1), which the
//   plan allows on sm_90+ only, so the pre-sm_90 bodies trap instead of silently doing nothing.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

namespace arfuse {

__device__ __forceinline__ void storeRelease(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void storeRelease2(uint64_t* p, uint64_t a, uint64_t b) {
  asm volatile("st.release.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ void loadAcquire2(const uint64_t* p, uint64_t* a, uint64_t* b) {
  asm volatile("ld.acquire.sys.global.v2.u64 {%0, %1}, [%2];" : "=l"(*a), "=l"(*b) : "l"(p) : "memory");
}
// Relaxed (volatile) 16-byte store / load of two flagged words: no ordering, each 8 bytes atomic.
__device__ __forceinline__ void storeVolatile2(void* p, uint64_t a, uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ void loadVolatile2(const void* p, uint64_t* a, uint64_t* b) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(*a), "=l"(*b) : "l"(p) : "memory");
}
__device__ __forceinline__ uint32_t loadVolatileU32(const uint32_t* p) {
  return *reinterpret_cast<const volatile uint32_t*>(p);
}
__device__ __forceinline__ void storeVolatileU32(uint32_t* p, uint32_t v) {
  *reinterpret_cast<volatile uint32_t*>(p) = v;
}
__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// 16-byte load of workspace data another thread or rank wrote during this call, through L2 only
// (.cg): a line of the same buffer left in the non-coherent L1 by an earlier call is never returned.
__device__ __forceinline__ uint4 loadL2(const void* p) { return __ldcg(reinterpret_cast<const uint4*>(p)); }
// 16-byte load of data another rank wrote into pinned host memory during this call: volatile (a
// relaxed, system-scope load no GPU cache may satisfy), ordered after the writer's flag by the
// acquire and the CTA barrier that follow it.
__device__ __forceinline__ uint4 loadHost16(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// ---- programmatic dependent launch -----------------------------------------------------------
__device__ __forceinline__ void pdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdlLaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// ---- clusters ------------------------------------------------------------------------------------
// Whether this architecture's build has them (sm_90+); below it every cluster instruction traps.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr bool kClustersBuilt = false;
#else
constexpr bool kClustersBuilt = true;
#endif
__device__ __forceinline__ void clusterArriveRelease() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void clusterWaitAcquire() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void clusterArrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void clusterWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#else
  __trap();
#endif
}
// Loads a float at `local` (an address in this CTA's shared memory) from the shared memory of CTA
// `rank` of the cluster.
__device__ __forceinline__ float loadClusterShared(const float* local, uint32_t rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(local));
  uint32_t remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
#else
  (void)local;
  (void)rank;
  __trap();
  return 0.f;
#endif
}

// ---- row push (ARFUSE_ROW_PUSH): partial sums pushed into the cluster's shared memory -------------
// An mbarrier in this CTA's shared memory counts the bytes other CTAs of the cluster store into it
// with st.async (each store completes its transaction on the destination's mbarrier), so a CTA waits
// only for its own memory, never on a cluster barrier.
__device__ __forceinline__ uint32_t sharedAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbarrierInit(uint64_t* bar, uint32_t arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sharedAddr(bar)), "r"(arrivals) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#else
  (void)bar;
  (void)arrivals;
  __trap();
#endif
}
// This thread's arrival, announcing `bytes` more to come from other CTAs.
__device__ __forceinline__ void mbarrierArriveExpectTx(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sharedAddr(bar)), "r"(bytes) : "memory");
#else
  (void)bar;
  (void)bytes;
  __trap();
#endif
}
// Waits until the phase of parity `parity` completed; what the other CTAs stored is then visible.
__device__ __forceinline__ void mbarrierWaitParity(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t done = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(sharedAddr(bar)), "r"(parity)
        : "memory");
  } while (!done);
#else
  (void)bar;
  (void)parity;
  __trap();
#endif
}
// Stores v at `local`'s place in the shared memory of CTA `rank` of the cluster, completing 4 bytes of
// the transaction on that CTA's mbarrier at `localBar`'s place.
__device__ __forceinline__ void pushClusterShared(const float* local, const uint64_t* localBar, uint32_t rank,
                                                  float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t addr, bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(addr) : "r"(sharedAddr(local)), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(bar) : "r"(sharedAddr(localBar)), "r"(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(addr),
               "r"(__float_as_uint(v)), "r"(bar)
               : "memory");
#else
  (void)local;
  (void)localBar;
  (void)rank;
  (void)v;
  __trap();
#endif
}

}  // namespace arfuse
