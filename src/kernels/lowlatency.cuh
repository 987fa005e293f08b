// Low-latency all-reduce (+ fused residual add and RMSNorm) for small messages.
//
// Readiness travels inside the data, as in NCCL's LL protocol: every 4 data bytes are sent as one
// 8-byte word {flag:32 | data:32}, and an aligned 8-byte store is single-copy atomic, so a reader
// that sees this call's flag in a word has that word's data. There is no separate barrier and no
// remote read: each rank *pushes* its rows into every peer's buffer (posted writes, one one-way
// trip) and then polls only its own memory.
//
// Per call, block b of G (rows b, b+G, ... on every rank):
//   1. send: the block's rows of x go to region [parity][me] of every peer's low-latency buffer,
//      each 16-byte vector as 4 flagged words (two 16-byte stores of two words each);
//   2. receive: for each row, the sum over ranks in rank order, own rows read from x and peers'
//      from this rank's buffer once their flags show this call, then the shared epilogue.
// Bitwise: the same fp32 additions in the same order as one-shot, so the same outputs on every rank.
//
// Flags: llFlag(call) in 1..2^32-1, never 0 (the buffer starts zeroed). A word of the call two
// epochs earlier carries a different flag, so stale data is never taken.
// Reuse: a sender writes parity p again at call e+2 only after its kernel for e+1 finished, and that
// kernel waited for data every peer sent in e+1 -- sent only after the peer's kernel for e finished
// reading parity p. This holds across changes of algorithm, since every path waits on every peer.
// Waits are bounded like every other wait (timeout -> abort the group; the call's outputs are then
// undefined and the host reports arfusePeerTimeout).
#pragma once

#include "kernels/epilogue.cuh"

namespace arfuse {

__device__ __forceinline__ void llStore(char* dst, uint4 d, uint32_t flag) {
  const uint64_t w0 = (static_cast<uint64_t>(flag) << 32) | d.x, w1 = (static_cast<uint64_t>(flag) << 32) | d.y;
  const uint64_t w2 = (static_cast<uint64_t>(flag) << 32) | d.z, w3 = (static_cast<uint64_t>(flag) << 32) | d.w;
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(dst), "l"(w0), "l"(w1) : "memory");
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(dst + 16), "l"(w2), "l"(w3) : "memory");
}

// Polls one flagged vector (4 words) of our own buffer until all carry `flag`. Returns false on
// timeout or group abort (the data is then zero).
__device__ inline bool llLoad(const KernelArgs& a, const char* src, uint32_t flag, int peer, uint64_t call,
                              uint4* out) {
  uint64_t start = 0;
  for (int polls = 1;; ++polls) {
    uint64_t w0, w1, w2, w3;
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(w0), "=l"(w1) : "l"(src) : "memory");
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(w2), "=l"(w3) : "l"(src + 16) : "memory");
    if (static_cast<uint32_t>(w0 >> 32) == flag && static_cast<uint32_t>(w1 >> 32) == flag &&
        static_cast<uint32_t>(w2 >> 32) == flag && static_cast<uint32_t>(w3 >> 32) == flag) {
      *out = make_uint4(static_cast<uint32_t>(w0), static_cast<uint32_t>(w1), static_cast<uint32_t>(w2),
                        static_cast<uint32_t>(w3));
      return true;
    }
    if (polls % kPollsPerCheck == 0) {
      if (loadVolatileInt(&a.shared->abort)) break;
      if (concurrentRun(a)) {
        raiseError(a, kErrConcurrent, -1, /*phase=*/2, call);
        break;
      }
      const uint64_t now = globalTimerNs();
      if (start == 0) {
        start = now;
      } else if (now - start > a.timeoutNs) {
        raiseTimeout(a, peer, /*phase=*/2, call);
        break;
      }
    }
  }
  *out = make_uint4(0, 0, 0, 0);
  return false;
}

template <typename T, bool kFused, bool kExt = false>
__global__ void __launch_bounds__(kMaxThreads) lowLatencyKernel(KernelArgs a) {
  constexpr int E = Vec<T>::kElems;
  const uint64_t call = beginCall(a);
  const uint32_t flag = llFlag(call);
  const int nvec = a.hidden / E;
  const size_t parityOffset = (call & 1) * a.llSourceBytes * a.nranks;
  const uint4* x = reinterpret_cast<const uint4*>(a.x);  // [tokens, nvec]

  // 0. block 0 sends the call's descriptor to every peer (checked below, before any row is reduced).
  sendDesc(a, a.peers.desc, call);
  // 1. send this block's rows to every peer: 32 bytes on the wire per 16 data bytes.
  const int nrows = (a.tokens - static_cast<int>(blockIdx.x) + gridDim.x - 1) / gridDim.x;
  for (int k = threadIdx.x; k < nrows * nvec; k += blockDim.x) {
    const int j = k / nvec, v = k - j * nvec;
    const size_t idx = (static_cast<size_t>(blockIdx.x) + static_cast<size_t>(j) * gridDim.x) * nvec + v;
    const uint4 d = x[idx];
    for (int p = 0; p < a.nranks; ++p)
      if (p != a.rank) llStore(a.peers.ll[p] + parityOffset + a.rank * a.llSourceBytes + idx * 32, d, flag);
  }
  // Every read of x by the send loop precedes any store of norm_out (which may alias x).
  checkDesc(a, a.peers.desc, call, /*phase=*/3);
  __syncthreads();

  // 2. receive and reduce, in rank order; our own rows straight from x.
  const char* mine = a.peers.ll[a.rank] + parityOffset;
  const uint4* residualIn = reinterpret_cast<const uint4*>(a.residualIn);
  const uint4* weight = reinterpret_cast<const uint4*>(a.weight);
  for (int row = blockIdx.x; row < a.tokens; row += gridDim.x) {
    const size_t rowOffset = static_cast<size_t>(row) * nvec;
    auto sum = [&](int v, float* acc) {
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] = 0.f;
      for (int r = 0; r < a.nranks; ++r) {
        uint4 d;
        if (r == a.rank)
          d = x[rowOffset + v];
        else
          llLoad(a, mine + r * a.llSourceBytes + (rowOffset + v) * 32, flag, r, call, &d);
        float f[E];
        Vec<T>::toFloat(d, f);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] += f[e];
      }
    };
    if (kFused) {
      addRmsNormRow<T, true, kMaxVecsPerThread, kExt>(sum, residualIn + rowOffset, weight, reinterpret_cast<uint4*>(a.normOut) + rowOffset,
                             reinterpret_cast<uint4*>(a.residualOut) + rowOffset, nvec, a.hidden, a.eps, kExt ? &a.ext : nullptr, row);
    } else {
      uint4* out = reinterpret_cast<uint4*>(a.residualOut) + rowOffset;  // [nvec]
      for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
        float acc[E];
        sum(v, acc);
        out[v] = Vec<T>::fromFloat(acc);
      }
    }
  }
  endCall(a, call);
}

}  // namespace arfuse
