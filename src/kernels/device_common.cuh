// Device-side building blocks shared by every arfuse kernel.
//
// - Vec<T>: one 16-byte access worth of elements (8 x bf16/fp16, 4 x fp32) converted to fp32.
// - Flags: system-scope release stores to peers and acquire loads of our own memory. A peer never
//   polls remote memory: each rank polls only flags that its peers *write into its own workspace*
//   (a local read), which matters over PCIe where every remote read is a non-posted round trip.
// - Bounded spins: every wait checks %globaltimer every kPollsPerCheck polls and the group abort flag
//   (host-mapped). On timeout the first waiter of the rank records {peer, block, call, phase} and
//   raises the abort flag so every other rank's waits end within one check interval.
// - blockSum: a deterministic block-wide fp32 sum (fixed shuffle tree + fixed shared-memory order),
//   so every rank computing the same row gets the same bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/kernel_args.h"

namespace arfuse {

template <typename T>
struct Vec;

template <>
struct Vec<float> {
  static constexpr int kElems = 4;
  __device__ static void toFloat(const uint4& v, float* f) {
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
  }
  __device__ static uint4 fromFloat(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
  }
};

template <typename H, typename H2>
struct HalfVec {
  static constexpr int kElems = 8;
  __device__ static float lo(uint32_t w);
  __device__ static void toFloat(const uint4& v, float* f) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      H2 h = *reinterpret_cast<const H2*>(&w[i]);
      f[2 * i] = toF(h.x);
      f[2 * i + 1] = toF(h.y);
    }
  }
  __device__ static uint4 fromFloat(const float* f) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      H2 h;
      h.x = fromF(f[2 * i]);
      h.y = fromF(f[2 * i + 1]);
      w[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
  __device__ static float toF(H h);
  __device__ static H fromF(float f);
};

template <>
__device__ inline float HalfVec<__nv_bfloat16, __nv_bfloat162>::toF(__nv_bfloat16 h) {
  return __bfloat162float(h);
}
template <>
__device__ inline __nv_bfloat16 HalfVec<__nv_bfloat16, __nv_bfloat162>::fromF(float f) {
  return __float2bfloat16_rn(f);
}
template <>
__device__ inline float HalfVec<__half, __half2>::toF(__half h) {
  return __half2float(h);
}
template <>
__device__ inline __half HalfVec<__half, __half2>::fromF(float f) {
  return __float2half_rn(f);
}

template <>
struct Vec<__nv_bfloat16> : HalfVec<__nv_bfloat16, __nv_bfloat162> {};
template <>
struct Vec<__half> : HalfVec<__half, __half2> {};

// ---- memory ordering ------------------------------------------------------------------------
__device__ __forceinline__ void storeRelease(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t loadAcquire(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ int loadVolatileInt(const int* p) {
  return *reinterpret_cast<const volatile int*>(p);
}
__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// 16-byte load of workspace data written by another thread or rank during this call: cached in
// L2 only (.cg), never in the non-coherent L1, so a line left there by the call two epochs ago
// (same buffer parity) can never be returned.
__device__ __forceinline__ uint4 loadShared16(const void* p) { return __ldcg(reinterpret_cast<const uint4*>(p)); }
// 16-byte load of data another rank wrote into pinned host memory during this call: volatile (a
// relaxed, system-scope load that no GPU cache may satisfy), ordered after the acquire of the
// writer's flag by the barrier's __syncthreads.
__device__ __forceinline__ uint4 loadHost16(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// More than one call of this rank running now (DeviceState::doneAndRunning): two streams at once.
constexpr uint64_t kRunningOne = 1ull << 32;
__device__ __forceinline__ bool concurrentRun(const KernelArgs& a) {
  return (*reinterpret_cast<volatile uint64_t*>(&a.state->doneAndRunning) >> 32) > 1;
}

// ---- bounded waits ----------------------------------------------------------------------------
constexpr int kPollsPerCheck = 256;

// Records the first error of this rank (code kErr*, the peer involved, the peer's descriptor for a
// mismatch) and aborts the group. Returns nothing: the caller exits.
__device__ inline void raiseError(const KernelArgs& a, int code, int peer, int phase, uint64_t call,
                                  CallDesc theirs = CallDesc{0, 0}) {
  ErrorRecord* rec = &a.shared->records[a.rank];
  if (atomicCAS(&a.state->errorClaimed, 0u, 1u) == 0u) {
    rec->peer = peer;
    rec->block = blockIdx.x;
    rec->phase = phase;
    rec->call = call;
    rec->mine = a.desc;
    rec->theirs = theirs;
    rec->code = code;
    __threadfence_system();
    *reinterpret_cast<volatile int*>(&rec->valid) = 1;
    if (a.flight) {  // the failed call, still "pending", so dumps show where this rank stopped
      volatile FlightEntry* e = &a.shared->flight[a.rank].entries[(call - 1) % kFlightEntries];
      e->desc.w0 = a.desc.w0;
      e->desc.w1 = a.desc.w1;
      e->startNs = *reinterpret_cast<volatile uint64_t*>(&a.state->startNs);
      e->endNs = 0;
      e->call = call;
    }
  }
  __threadfence_system();
  *reinterpret_cast<volatile int*>(&a.shared->abort) = 1;
}
__device__ inline void raiseTimeout(const KernelArgs& a, int peer, int phase, uint64_t call) {
  raiseError(a, kErrPeerTimeout, peer, phase, call);
}

// Waits until *flag >= expected (wrap-safe). Returns false on timeout or group abort.
__device__ inline bool waitFlag(const KernelArgs& a, const uint64_t* flag, uint64_t expected, int peer, int phase,
                                uint64_t call) {
  uint64_t start = 0;
  for (int polls = 1;; ++polls) {
    if (static_cast<int64_t>(loadAcquire(flag) - expected) >= 0) return true;
    if (polls % kPollsPerCheck == 0) {
      if (loadVolatileInt(&a.shared->abort)) return false;
      if (concurrentRun(a)) {
        raiseError(a, kErrConcurrent, -1, phase, call);
        return false;
      }
      const uint64_t now = globalTimerNs();
      if (start == 0) {
        start = now;
      } else if (now - start > a.timeoutNs) {
        raiseTimeout(a, peer, phase, call);
        return false;
      }
    }
  }
}

// Per-block barrier across ranks. Block b of every rank takes part; block b of rank r writes
// `value` into slot [b][r] of each peer's flag array, then waits for slot [b][p] of its own array to
// reach `value` for every peer p. The __syncthreads before the release makes every write of this
// block (the copy-in, phase-1 results) visible before the flag (release is cumulative over the
// CTA barrier); the __syncthreads after the acquire extends the acquire to the whole block.
// Returns false (uniformly across the block) if the group aborted.
// `flags` are the per-rank flag arrays: the peers' device memory (P2P paths) or the group's
// host-mapped area (host-staged path).
__device__ inline bool blockBarrier(const KernelArgs& a, uint64_t* const* flags, uint64_t value, int phase,
                                    uint64_t call) {
  __syncthreads();
  bool ok = true;
  const int t = threadIdx.x;
  if (t < a.nranks) {
    uint64_t* remote = flags[t] + blockIdx.x * kMaxRanks + a.rank;
    storeRelease(remote, value);
    if (t != a.rank) ok = waitFlag(a, flags[a.rank] + blockIdx.x * kMaxRanks + t, value, t, phase, call);
  }
  return __syncthreads_and(ok) != 0;
}
__device__ inline bool blockBarrier(const KernelArgs& a, uint64_t value, int phase, uint64_t call) {
  return blockBarrier(a, a.peers.flags, value, phase, call);
}

// ---- call epochs, misuse detection, flight recorder ---------------------------------------------
// Every block reads the rank's call counter at entry; the last block to leave advances it. All
// blocks have read it before any block can be last, so the whole grid sees the same epoch.
// Block 0 also counts the call as running (a reduction: no round trip) and notes its start time in
// device memory. Two calls of one rank overlapping in time (two streams) break the single-in-flight
// protocol; they are caught (kErrConcurrent, the group aborts) by whichever comes first: a block
// leaving while the other call runs, or a wait's periodic check (concurrentRun).
__device__ inline uint64_t beginCall(const KernelArgs& a) {
  __shared__ uint64_t call;
  if (threadIdx.x == 0) {
    call = *reinterpret_cast<volatile uint64_t*>(&a.state->call) + 1;
    if (blockIdx.x == 0) {
      atomicAdd(reinterpret_cast<unsigned long long*>(&a.state->doneAndRunning), kRunningOne);  // result unused: RED
      a.state->startNs = globalTimerNs();
    }
  }
  __syncthreads();
  return call;
}
__device__ inline void endCall(const KernelArgs& a, uint64_t call) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const uint64_t prev = atomicAdd(reinterpret_cast<unsigned long long*>(&a.state->doneAndRunning), 1ull);
    if ((prev >> 32) > 1) raiseError(a, kErrConcurrent, -1, /*phase=*/4, call);
    if (static_cast<uint32_t>(prev) == gridDim.x - 1) {
      // Last block: this call's blocks and its running mark leave the counter (fire-and-forget).
      atomicAdd(reinterpret_cast<unsigned long long*>(&a.state->doneAndRunning),
                0ull - (kRunningOne + static_cast<uint64_t>(gridDim.x)));
      *reinterpret_cast<volatile uint64_t*>(&a.state->call) = call;
      __threadfence();
      if (a.flight) {
        volatile FlightEntry* e = &a.shared->flight[a.rank].entries[(call - 1) % kFlightEntries];
        e->desc.w0 = a.desc.w0;
        e->desc.w1 = a.desc.w1;
        e->startNs = *reinterpret_cast<volatile uint64_t*>(&a.state->startNs);
        e->endNs = globalTimerNs();
        e->call = call;
      }
    }
  }
}

// ---- call descriptors (divergent-call detection) ------------------------------------------------
// The flag of a call in a flagged 8-byte word: 1..2^32-1, never 0 (areas start zeroed).
__device__ __forceinline__ uint32_t llFlag(uint64_t call) {
  return static_cast<uint32_t>((call - 1) % 0xFFFFFFFFull) + 1u;
}
__device__ __forceinline__ char* descSlot(char* area, uint64_t call, int src) {
  return area + ((call & 1) * kMaxRanks + src) * kDescSlotBytes;
}
// Block 0, thread t (t != rank) sends this call's descriptor to rank t as two flagged words (no
// fence: the flag in each word says which call it belongs to). The P2P barrier paths send it right
// after their first barrier (a remote store before a release would make the release wait for it);
// the host-staged path before its barrier, whose release waits for host writes anyway, so there
// the descriptor is visible once the barrier flag is.
__device__ inline void sendDesc(const KernelArgs& a, char* const* areas, uint64_t call) {
  const int t = threadIdx.x;
  if (blockIdx.x == 0 && t < a.nranks && t != a.rank) {
    const uint64_t f = static_cast<uint64_t>(llFlag(call)) << 32;
    asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(descSlot(areas[t], call, a.rank)),
                 "l"(f | a.desc.w0), "l"(f | a.desc.w1)
                 : "memory");
  }
}
// Block 0, thread t (t != rank): waits (bounded) for rank t's descriptor of this call and compares
// it with ours; a difference aborts the group with kErrMismatch naming rank t and both calls.
// Returns false if this thread raised or saw an error.
__device__ inline bool checkDesc(const KernelArgs& a, char* const* areas, uint64_t call, int phase) {
  const int t = threadIdx.x;
  if (blockIdx.x != 0 || t >= a.nranks || t == a.rank) return true;
  const char* src = descSlot(areas[a.rank], call, t);
  const uint32_t flag = llFlag(call);
  uint64_t start = 0;
  for (int polls = 1;; ++polls) {
    uint64_t w0, w1;
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(w0), "=l"(w1) : "l"(src) : "memory");
    if (static_cast<uint32_t>(w0 >> 32) == flag && static_cast<uint32_t>(w1 >> 32) == flag) {
      const CallDesc theirs{static_cast<uint32_t>(w0), static_cast<uint32_t>(w1)};
      if (theirs.w0 == a.desc.w0 && theirs.w1 == a.desc.w1) return true;
      raiseError(a, kErrMismatch, t, phase, call, theirs);
      return false;
    }
    if (polls % kPollsPerCheck == 0) {
      if (loadVolatileInt(&a.shared->abort)) return false;
      if (concurrentRun(a)) {
        raiseError(a, kErrConcurrent, -1, phase, call);
        return false;
      }
      const uint64_t now = globalTimerNs();
      if (start == 0) {
        start = now;
      } else if (now - start > a.timeoutNs) {
        raiseTimeout(a, t, phase, call);
        return false;
      }
    }
  }
}

// Barrier paths over slow links: load the peer's descriptor right after the barrier that made it
// visible, compare at the end, so the load's round trip overlaps the call's work.
struct DescProbe {
  uint64_t w0, w1;
};
__device__ inline DescProbe loadDesc(const KernelArgs& a, char* const* areas, uint64_t call) {
  DescProbe p{0, 0};
  const int t = threadIdx.x;
  if (blockIdx.x == 0 && t < a.nranks && t != a.rank)
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];"
                 : "=l"(p.w0), "=l"(p.w1)
                 : "l"(descSlot(areas[a.rank], call, t))
                 : "memory");
  return p;
}
__device__ inline void compareDesc(const KernelArgs& a, char* const* areas, const DescProbe& p, uint64_t call,
                                   int phase) {
  const int t = threadIdx.x;
  if (blockIdx.x != 0 || t >= a.nranks || t == a.rank) return;
  const uint32_t flag = llFlag(call);
  if (static_cast<uint32_t>(p.w0 >> 32) == flag && static_cast<uint32_t>(p.w1 >> 32) == flag &&
      static_cast<uint32_t>(p.w0) == a.desc.w0 && static_cast<uint32_t>(p.w1) == a.desc.w1)
    return;
  checkDesc(a, areas, call, phase);  // differs (or not yet seen): the full check decides and records
}

// ---- reductions -------------------------------------------------------------------------------
__device__ inline float warpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Deterministic: same blockDim -> same order of additions on every rank.
__device__ inline float blockSum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  v = warpSum(v);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int nwarps = (blockDim.x + 31) >> 5;
    float s = lane < nwarps ? partial[lane] : 0.f;
    s = warpSum(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  const float r = total;
  __syncthreads();  // partial/total may be reused by the next row
  return r;
}

}  // namespace arfuse
