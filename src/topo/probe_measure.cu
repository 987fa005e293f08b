// The measured probes: what the fabric actually does, as opposed to what the driver reports.
//
// 1. Peer load and store, per ordered pair (i, j) with canAccessPeer. i copies j's buffer, which j
//    filled with a pattern that depends on j, and the host checks every word; i writes a pattern that
//    depends on (i, j) into j's inbox and the host reads it back through j. "P2P reported" and "P2P
//    working" differ when ACS or an IOMMU sits between the GPUs: such loads typically return all-ones
//    or stale bytes instead of faulting, so only comparing the bytes tells.
// 2. Bandwidth with every working pair transferring at once (reads, then writes): one kernel per GPU
//    whose blocks are split among its peers, all kernels held at a start flag in pinned host memory
//    until every one is launched. Each block stamps %globaltimer at start and end; a pair's window is
//    its blocks' first start to last end. Some PCIe switches collapse under concurrent peer writes
//    (2.6 GB/s) while reads hold (52 GB/s): that is the case this measures.
// 3. Each pair's read bandwidth alone (nothing else running): compared with what the link allows
//    (linkNominalGBps), an order of magnitude less means the traffic takes a detour through system
//    memory.
// 4. One-way flag latency: ping-pong between one thread on each GPU, each polling a flag in its own
//    memory that the other writes (st.release.sys / ld.acquire.sys), as the collectives' barriers do;
//    half the round trip.
// 5. Per GPU, pinned host memory: read and write bandwidth of a kernel, and the round trip of a flag
//    pair in host memory between two blocks (what the host-staged path's barrier costs).
//
// Every wait is bounded (%globaltimer in kernels, a polling loop on the host); after a timeout or a
// CUDA error the probe stops and says what it did not measure.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "probe_measure.h"

namespace arfuse {
namespace topo {

namespace {

constexpr int kThreads = 512;
constexpr int kMaxPeers = 16;
constexpr int kUnroll = 4;

__host__ __device__ inline uint32_t patternWord(uint32_t salt, uint32_t k) {
  uint32_t h = salt * 0x9E3779B9u ^ (k + 0x7F4A7C15u);
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return (h & 0x7FFFFFFFu) | 1u;  // never 0 (fresh memory) nor 0xFFFFFFFF (a failed PCIe read)
}

__device__ __forceinline__ uint64_t globalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void storeRelease(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t loadAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__global__ void fillKernel(uint32_t* p, size_t n, uint32_t salt) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = patternWord(salt, static_cast<uint32_t>(i));
}

// Peer load: 16-byte loads from `src` (a peer's memory), the width the collectives use.
__global__ void copyKernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n4) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = __ldcg(src + i);
}

// Peer store: 16-byte stores of the pattern into `dst` (a peer's memory).
__global__ void storeKernel(uint4* dst, size_t n4, uint32_t salt) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t k = static_cast<uint32_t>(4 * i);
    dst[i] =
        make_uint4(patternWord(salt, k), patternWord(salt, k + 1), patternWord(salt, k + 2), patternWord(salt, k + 3));
  }
  __threadfence_system();
}

struct BwArgs {
  const uint4* src[kMaxPeers];  // reads: the peers' buffers
  uint4* dst[kMaxPeers];        // writes: this GPU's slot in each peer's memory
  size_t n4;                    // 16-byte words per pass
  int passes;
  int blocksPerPeer;
  int write;
  const uint32_t* go;          // pinned host flag: start when non-zero
  unsigned long long* stamps;  // [block][start, end]
  uint32_t* sink;              // [block * threads]: keeps the loads alive
  unsigned long long timeoutNs;
  uint32_t* timedOut;
};

// Block b serves peer b / blocksPerPeer. All blocks of all GPUs wait for `go`, so the windows overlap.
__global__ void __launch_bounds__(kThreads) bandwidthKernel(BwArgs a) {
  const int peer = blockIdx.x / a.blocksPerPeer;
  const int part = blockIdx.x % a.blocksPerPeer;
  __shared__ uint64_t start;
  if (threadIdx.x == 0) {
    const uint64_t t0 = globalTimer();
    while (loadAcquire(a.go) == 0) {
      if (globalTimer() - t0 > a.timeoutNs) {
        atomicExch(a.timedOut, 1u);
        break;
      }
    }
    start = globalTimer();
  }
  __syncthreads();
  const size_t stride = static_cast<size_t>(a.blocksPerPeer) * blockDim.x;
  const size_t first = static_cast<size_t>(part) * blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  for (int p = 0; p < a.passes; ++p) {
    if (a.write) {
      uint4* d = a.dst[peer];
      const uint4 v = make_uint4(p, part, threadIdx.x, 1);
      for (size_t i = first; i < a.n4; i += stride) __stcg(d + i, v);
    } else {
      const uint4* s = a.src[peer];
      size_t i = first;
      for (; i + (kUnroll - 1) * stride < a.n4; i += kUnroll * stride) {
        uint4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) v[u] = __ldcg(s + i + u * stride);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
      }
      for (; i < a.n4; i += stride) {
        const uint4 v = __ldcg(s + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
      }
    }
  }
  if (a.write) __threadfence_system();  // the window ends when the stores have landed, not when issued
  a.sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    a.stamps[2 * blockIdx.x] = start;
    a.stamps[2 * blockIdx.x + 1] = globalTimer();
  }
}

// Spins until *flag == want; false after the timeout (then raises *timedOut).
__device__ bool waitFor(const uint32_t* flag, uint32_t want, uint64_t deadline, uint32_t* timedOut) {
  int polls = 0;
  while (loadAcquire(flag) != want) {
    if (++polls == 256) {
      polls = 0;
      if (globalTimer() > deadline) {
        atomicExch(timedOut, 1u);
        return false;
      }
    }
  }
  return true;
}

// One side of a ping-pong: `mine` is polled (this GPU's memory, or host memory), `theirs` written.
// The initiator records the time of rounds [warm, rounds) in *elapsedNs.
__device__ void pingPong(uint32_t* mine, uint32_t* theirs, int rounds, int warm, bool initiator,
                         unsigned long long timeoutNs, unsigned long long* elapsedNs, uint32_t* timedOut) {
  const uint64_t deadline = globalTimer() + timeoutNs;
  uint64_t t0 = 0;
  for (int r = 1; r <= rounds; ++r) {
    if (initiator && r == warm + 1) t0 = globalTimer();
    const uint32_t v = static_cast<uint32_t>(r);
    if (initiator) {
      storeRelease(theirs, v);
      if (!waitFor(mine, v, deadline, timedOut)) return;
    } else {
      if (!waitFor(mine, v, deadline, timedOut)) return;
      storeRelease(theirs, v);
    }
  }
  if (initiator) *elapsedNs = globalTimer() - t0;
}

__global__ void pingPongKernel(uint32_t* mine, uint32_t* theirs, int rounds, int warm, int initiator,
                               unsigned long long timeoutNs, unsigned long long* elapsedNs, uint32_t* timedOut) {
  if (threadIdx.x == 0) pingPong(mine, theirs, rounds, warm, initiator != 0, timeoutNs, elapsedNs, timedOut);
}

// Two blocks of one GPU bounce a flag pair that lives in pinned host memory.
__global__ void hostPingPongKernel(uint32_t* flags, int rounds, int warm, unsigned long long timeoutNs,
                                   unsigned long long* elapsedNs, uint32_t* timedOut) {
  if (threadIdx.x != 0) return;
  const bool initiator = blockIdx.x == 0;
  pingPong(flags + (initiator ? 0 : 32), flags + (initiator ? 32 : 0), rounds, warm, initiator, timeoutNs, elapsedNs,
           timedOut);
}

// ---- host side --------------------------------------------------------------------------------

std::string str(cudaError_t e) { return cudaGetErrorString(e); }

// Everything the probe allocates, freed in the destructor (unless a kernel hung: then nothing is
// touched again, since the device may never answer).
struct Resources {
  struct PerGpu {
    uint32_t* checkSrc = nullptr;  // pattern of this GPU, read by peers
    uint32_t* checkDst = nullptr;  // this GPU's copy of a peer's pattern
    uint32_t* inbox = nullptr;     // [peer][checkBytes]: what peers store here
    uint4* bwSrc = nullptr;        // read by peers
    uint4* bwDst = nullptr;        // [peer][bandwidthBytes]: written by peers
    uint32_t* flags = nullptr;     // [peer][32 words]: ping-pong flags written by peers
    unsigned long long* stamps = nullptr;
    uint32_t* sink = nullptr;
    uint32_t* timedOut = nullptr;
    unsigned long long* elapsed = nullptr;
    cudaStream_t stream = nullptr;
    std::vector<int> peersEnabled;
  };
  std::vector<PerGpu> gpu;
  uint32_t* hostGo = nullptr;     // pinned, mapped
  uint32_t* hostFlags = nullptr;  // pinned, mapped: 64 words
  uint4* hostBuf = nullptr;       // pinned, mapped
  // The same three as the GPUs address them (equal to the host pointers under UVA, asked anyway).
  uint32_t* hostGoDev = nullptr;
  uint32_t* hostFlagsDev = nullptr;
  uint4* hostBufDev = nullptr;
  bool hung = false;

  ~Resources() {
    if (hung) return;
    for (size_t d = 0; d < gpu.size(); ++d) {
      PerGpu& g = gpu[d];
      if (cudaSetDevice(static_cast<int>(d)) != cudaSuccess) continue;
      cudaDeviceSynchronize();
      for (int p : g.peersEnabled) cudaDeviceDisablePeerAccess(p);
      for (void* ptr : {static_cast<void*>(g.checkSrc), static_cast<void*>(g.checkDst), static_cast<void*>(g.inbox),
                        static_cast<void*>(g.bwSrc), static_cast<void*>(g.bwDst), static_cast<void*>(g.flags),
                        static_cast<void*>(g.stamps), static_cast<void*>(g.sink), static_cast<void*>(g.timedOut),
                        static_cast<void*>(g.elapsed)})
        if (ptr) cudaFree(ptr);
      if (g.stream) cudaStreamDestroy(g.stream);
    }
    if (hostGo) cudaFreeHost(hostGo);
    if (hostFlags) cudaFreeHost(hostFlags);
    if (hostBuf) cudaFreeHost(hostBuf);
    cudaGetLastError();
  }
};

class Prober {
 public:
  Prober(Topology* t, const ProbeOptions& opt, std::vector<std::string>* notes)
      : t_(*t), opt_(opt), notes_(*notes), n_(t->size()) {}

  bool run();

 private:
  bool fail(const std::string& what) {
    notes_.push_back("measurement stopped: " + what);
    return false;
  }
  bool check(cudaError_t e, const std::string& what) {
    if (e == cudaSuccess) return true;
    cudaGetLastError();
    return fail(what + ": " + str(e));
  }
  // Waits for device d's stream with a bound; a timeout marks the run as hung.
  bool wait(int d, const std::string& what);
  bool allocate();
  bool checkPairs();
  bool concurrentBandwidth(bool write);
  bool soloReads();
  bool latencies();
  bool hostProbes();
  int blocksPerPeer(int d, int npeers) const {
    return std::max(1, std::min(32, t_.gpus[d].smCount / std::max(1, npeers)));
  }
  unsigned long long timeoutNs() const { return static_cast<unsigned long long>(opt_.timeoutSeconds * 1e9); }
  // Launches bandwidthKernel on d over `peers` (indices into a.src / a.dst already filled).
  bool launchBandwidth(int d, BwArgs a, int npeers, int bpp);
  bool windowsOf(int d, int npeers, int bpp, std::vector<double>* seconds);
  // What a finished ping-pong kernel left on g: its timed rounds' nanoseconds and whether it timed out.
  bool pingPongResult(const Resources::PerGpu& g, unsigned long long* ns, bool* timedOut) {
    uint32_t to = 0;
    if (!check(cudaMemcpy(ns, g.elapsed, sizeof *ns, cudaMemcpyDeviceToHost), "cudaMemcpy") ||
        !check(cudaMemcpy(&to, g.timedOut, sizeof to, cudaMemcpyDeviceToHost), "cudaMemcpy"))
      return false;
    *timedOut = to != 0;
    return true;
  }

  Topology& t_;
  const ProbeOptions& opt_;
  std::vector<std::string>& notes_;
  const int n_;
  Resources res_;
  std::vector<std::vector<bool>> works_;  // [i][j]: peer load and store i -> j both checked fine
};

bool Prober::wait(int d, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  cudaStream_t s = res_.gpu[d].stream;
  for (;;) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) return check(e, what + " on GPU " + std::to_string(d));
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > opt_.timeoutSeconds + 1.0) {
      res_.hung = true;
      return fail(what + " on GPU " + std::to_string(d) + " did not finish within " +
                  std::to_string(static_cast<int>(opt_.timeoutSeconds + 1)) +
                  " s (a peer access that never completes); the GPU may need a reset");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

bool Prober::allocate() {
  res_.gpu.resize(n_);
  if (!check(cudaHostAlloc(reinterpret_cast<void**>(&res_.hostGo), 256, cudaHostAllocMapped | cudaHostAllocPortable),
             "cudaHostAlloc(start flag)") ||
      !check(cudaHostAlloc(reinterpret_cast<void**>(&res_.hostFlags), 256, cudaHostAllocMapped | cudaHostAllocPortable),
             "cudaHostAlloc(host flags)") ||
      !check(cudaHostAlloc(reinterpret_cast<void**>(&res_.hostBuf), opt_.hostBytes,
                           cudaHostAllocMapped | cudaHostAllocPortable),
             "cudaHostAlloc(host buffer)"))
    return false;
  *res_.hostGo = 0;
  if (!check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&res_.hostGoDev), res_.hostGo, 0),
             "cudaHostGetDevicePointer") ||
      !check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&res_.hostFlagsDev), res_.hostFlags, 0),
             "cudaHostGetDevicePointer") ||
      !check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&res_.hostBufDev), res_.hostBuf, 0),
             "cudaHostGetDevicePointer"))
    return false;
  const size_t checkWords = opt_.checkBytes / 4;
  const size_t peers = static_cast<size_t>(std::max(1, n_ - 1));
  for (int d = 0; d < n_; ++d) {
    Resources::PerGpu& g = res_.gpu[d];
    const std::string on = " on GPU " + std::to_string(d);
    const int blocks = std::max(64, t_.gpus[d].smCount);
    if (!check(cudaSetDevice(d), "cudaSetDevice" + on) ||
        !check(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking), "cudaStreamCreate" + on) ||
        !check(cudaMalloc(&g.checkSrc, opt_.checkBytes), "cudaMalloc" + on) ||
        !check(cudaMalloc(&g.checkDst, opt_.checkBytes), "cudaMalloc" + on) ||
        !check(cudaMalloc(&g.inbox, opt_.checkBytes * n_), "cudaMalloc" + on) ||
        !check(cudaMalloc(&g.flags, 128 * n_), "cudaMalloc" + on) ||
        !check(cudaMalloc(&g.stamps, 2 * sizeof(unsigned long long) * blocks), "cudaMalloc" + on) ||
        !check(cudaMalloc(&g.sink, sizeof(uint32_t) * kThreads * blocks), "cudaMalloc" + on) ||
        !check(cudaMalloc(&g.timedOut, sizeof(uint32_t)), "cudaMalloc" + on) ||
        !check(cudaMalloc(&g.elapsed, sizeof(unsigned long long)), "cudaMalloc" + on))
      return false;
    if (n_ > 1 && (!check(cudaMalloc(&g.bwSrc, opt_.bandwidthBytes), "cudaMalloc" + on) ||
                   !check(cudaMalloc(&g.bwDst, opt_.bandwidthBytes * peers), "cudaMalloc" + on)))
      return false;
    fillKernel<<<64, 256, 0, g.stream>>>(g.checkSrc, checkWords, 1000u + d);
    if (!check(cudaMemsetAsync(g.inbox, 0, opt_.checkBytes * n_, g.stream), "cudaMemset" + on) ||
        !check(cudaMemsetAsync(g.flags, 0, 128 * n_, g.stream), "cudaMemset" + on) ||
        !check(cudaMemsetAsync(g.timedOut, 0, sizeof(uint32_t), g.stream), "cudaMemset" + on))
      return false;
    if (g.bwSrc && !check(cudaMemsetAsync(g.bwSrc, 0x5a, opt_.bandwidthBytes, g.stream), "cudaMemset" + on))
      return false;
    if (!wait(d, "setup")) return false;
  }
  return true;
}

bool Prober::checkPairs() {
  works_.assign(n_, std::vector<bool>(n_, false));
  const size_t words = opt_.checkBytes / 4;
  std::vector<uint32_t> host(words);
  for (int i = 0; i < n_; ++i) {
    for (int j = 0; j < n_; ++j) {
      if (i == j || !t_.link(i, j).canAccessPeer) continue;
      Measured& m = t_.link(i, j).measured;
      const std::string pair = std::to_string(i) + "->" + std::to_string(j);
      if (!check(cudaSetDevice(i), "cudaSetDevice")) return false;
      cudaError_t e = cudaDeviceEnablePeerAccess(j, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();
      } else if (e != cudaSuccess) {
        cudaGetLastError();
        m.peerLoad = false;
        m.peerStore = false;
        notes_.push_back("peer " + pair + ": cudaDeviceEnablePeerAccess failed: " + str(e));
        continue;
      } else {
        res_.gpu[i].peersEnabled.push_back(j);
      }
      Resources::PerGpu& gi = res_.gpu[i];
      Resources::PerGpu& gj = res_.gpu[j];
      // Load: i copies j's pattern into its own memory.
      if (!check(cudaMemsetAsync(gi.checkDst, 0, opt_.checkBytes, gi.stream), "cudaMemset")) return false;
      copyKernel<<<32, 256, 0, gi.stream>>>(reinterpret_cast<const uint4*>(gj.checkSrc),
                                            reinterpret_cast<uint4*>(gi.checkDst), opt_.checkBytes / 16);
      if (!check(cudaGetLastError(), "peer load " + pair + " launch") || !wait(i, "peer load " + pair)) {
        m.peerLoad = false;  // a load that faults or never completes failed, whatever else it broke
        return false;
      }
      if (!check(cudaMemcpy(host.data(), gi.checkDst, opt_.checkBytes, cudaMemcpyDeviceToHost), "cudaMemcpy"))
        return false;
      size_t bad = 0, firstBad = words;
      for (size_t k = 0; k < words; ++k) {
        if (host[k] != patternWord(1000u + j, static_cast<uint32_t>(k)) && bad++ == 0) firstBad = k;
      }
      m.peerLoad = bad == 0;
      if (bad) {
        char got[16];
        std::snprintf(got, sizeof got, "%08x", host[firstBad]);
        notes_.push_back("peer load " + pair + ": " + std::to_string(bad) + " of " + std::to_string(words) +
                         " words wrong (first at word " + std::to_string(firstBad) + ": read 0x" + got + ")");
      }
      // Store: i writes into its slot of j's inbox; the host reads it back through j.
      uint32_t* slot = gj.inbox + words * i;
      const uint32_t salt = 5000u + 64u * i + j;
      storeKernel<<<32, 256, 0, gi.stream>>>(reinterpret_cast<uint4*>(slot), opt_.checkBytes / 16, salt);
      if (!check(cudaGetLastError(), "peer store " + pair + " launch") || !wait(i, "peer store " + pair)) {
        m.peerStore = false;
        return false;
      }
      if (!check(cudaSetDevice(j), "cudaSetDevice") ||
          !check(cudaMemcpy(host.data(), slot, opt_.checkBytes, cudaMemcpyDeviceToHost), "cudaMemcpy"))
        return false;
      bad = 0;
      for (size_t k = 0; k < words; ++k) bad += host[k] != patternWord(salt, static_cast<uint32_t>(k));
      m.peerStore = bad == 0;
      if (bad)
        notes_.push_back("peer store " + pair + ": " + std::to_string(bad) + " of " + std::to_string(words) +
                         " words did not arrive as written");
      works_[i][j] = *m.peerLoad && *m.peerStore;
    }
  }
  return true;
}

bool Prober::launchBandwidth(int d, BwArgs a, int npeers, int bpp) {
  Resources::PerGpu& g = res_.gpu[d];
  a.blocksPerPeer = bpp;
  a.go = res_.hostGoDev;
  a.stamps = g.stamps;
  a.sink = g.sink;
  a.timeoutNs = timeoutNs();
  a.timedOut = g.timedOut;
  if (!check(cudaSetDevice(d), "cudaSetDevice") ||
      !check(cudaMemsetAsync(g.timedOut, 0, sizeof(uint32_t), g.stream), "cudaMemset"))
    return false;
  bandwidthKernel<<<bpp * npeers, kThreads, 0, g.stream>>>(a);
  return check(cudaGetLastError(), "bandwidth kernel launch on GPU " + std::to_string(d));
}

bool Prober::windowsOf(int d, int npeers, int bpp, std::vector<double>* seconds) {
  std::vector<unsigned long long> st(2 * bpp * npeers);
  uint32_t timedOut = 0;
  if (!check(cudaSetDevice(d), "cudaSetDevice") ||
      !check(cudaMemcpy(st.data(), res_.gpu[d].stamps, st.size() * sizeof(st[0]), cudaMemcpyDeviceToHost),
             "cudaMemcpy") ||
      !check(cudaMemcpy(&timedOut, res_.gpu[d].timedOut, sizeof timedOut, cudaMemcpyDeviceToHost), "cudaMemcpy"))
    return false;
  if (timedOut) return fail("a bandwidth kernel on GPU " + std::to_string(d) + " never saw the start flag");
  seconds->assign(npeers, 0);
  for (int p = 0; p < npeers; ++p) {
    unsigned long long lo = ~0ull, hi = 0;
    for (int b = p * bpp; b < (p + 1) * bpp; ++b) {
      lo = std::min(lo, st[2 * b]);
      hi = std::max(hi, st[2 * b + 1]);
    }
    (*seconds)[p] = hi > lo ? (hi - lo) * 1e-9 : 0;
  }
  return true;
}

bool Prober::concurrentBandwidth(bool write) {
  *res_.hostGo = 0;
  std::vector<std::vector<int>> peersOf(n_);
  std::vector<int> bpp(n_);
  for (int i = 0; i < n_; ++i) {
    BwArgs a{};
    a.n4 = opt_.bandwidthBytes / 16;
    a.passes = opt_.bandwidthPasses;
    a.write = write;
    for (int j = 0; j < n_; ++j) {
      if (i == j || !works_[i][j]) continue;
      const int k = static_cast<int>(peersOf[i].size());
      a.src[k] = res_.gpu[j].bwSrc;
      // i's slot in j's receive area: slot index = i's position among j's possible senders.
      a.dst[k] = res_.gpu[j].bwDst + (opt_.bandwidthBytes / 16) * (i < j ? i : i - 1);
      peersOf[i].push_back(j);
    }
    if (peersOf[i].empty()) continue;
    bpp[i] = blocksPerPeer(i, static_cast<int>(peersOf[i].size()));
    if (!launchBandwidth(i, a, static_cast<int>(peersOf[i].size()), bpp[i])) return false;
  }
  // Every kernel is queued (and spinning) before any starts moving data.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  __atomic_store_n(res_.hostGo, 1u, __ATOMIC_SEQ_CST);
  const char* what = write ? "concurrent peer writes" : "concurrent peer reads";
  for (int i = 0; i < n_; ++i)
    if (!peersOf[i].empty() && !wait(i, what)) return false;
  const double bytes = static_cast<double>(opt_.bandwidthBytes) * opt_.bandwidthPasses;
  for (int i = 0; i < n_; ++i) {
    if (peersOf[i].empty()) continue;
    std::vector<double> sec;
    if (!windowsOf(i, static_cast<int>(peersOf[i].size()), bpp[i], &sec)) return false;
    for (size_t k = 0; k < peersOf[i].size(); ++k) {
      if (sec[k] <= 0) continue;
      Measured& m = t_.link(i, peersOf[i][k]).measured;
      (write ? m.writeGBps : m.readGBps) = bytes / sec[k] / 1e9;
    }
  }
  return true;
}

bool Prober::soloReads() {
  __atomic_store_n(res_.hostGo, 1u, __ATOMIC_SEQ_CST);
  const double bytes = static_cast<double>(opt_.bandwidthBytes) * opt_.bandwidthPasses;
  for (int i = 0; i < n_; ++i) {
    for (int j = 0; j < n_; ++j) {
      if (i == j || !works_[i][j]) continue;
      BwArgs a{};
      a.n4 = opt_.bandwidthBytes / 16;
      a.passes = opt_.bandwidthPasses;
      a.src[0] = res_.gpu[j].bwSrc;
      const int bpp = blocksPerPeer(i, 1);
      if (!launchBandwidth(i, a, 1, bpp) || !wait(i, "solo peer read")) return false;
      std::vector<double> sec;
      if (!windowsOf(i, 1, bpp, &sec)) return false;
      if (sec[0] > 0) t_.link(i, j).measured.soloReadGBps = bytes / sec[0] / 1e9;
    }
  }
  return true;
}

bool Prober::latencies() {
  const int rounds = std::max(20, opt_.latencyRounds), warm = rounds / 10;
  for (int i = 0; i < n_; ++i) {
    for (int j = i + 1; j < n_; ++j) {
      if (!works_[i][j] || !works_[j][i]) continue;
      Resources::PerGpu& gi = res_.gpu[i];
      Resources::PerGpu& gj = res_.gpu[j];
      uint32_t* flagAtI = gi.flags + 32 * j;  // written by j, polled by i
      uint32_t* flagAtJ = gj.flags + 32 * i;  // written by i, polled by j
      if (!check(cudaSetDevice(j), "cudaSetDevice") ||
          !check(cudaMemsetAsync(flagAtJ, 0, 128, gj.stream), "cudaMemset") ||
          !check(cudaMemsetAsync(gj.timedOut, 0, 4, gj.stream), "cudaMemset") ||
          !check(cudaSetDevice(i), "cudaSetDevice") ||
          !check(cudaMemsetAsync(flagAtI, 0, 128, gi.stream), "cudaMemset") ||
          !check(cudaMemsetAsync(gi.timedOut, 0, 4, gi.stream), "cudaMemset") || !wait(i, "reset") || !wait(j, "reset"))
        return false;
      cudaSetDevice(j);
      pingPongKernel<<<1, 32, 0, gj.stream>>>(flagAtJ, flagAtI, rounds, warm, 0, timeoutNs(), gj.elapsed, gj.timedOut);
      cudaSetDevice(i);
      pingPongKernel<<<1, 32, 0, gi.stream>>>(flagAtI, flagAtJ, rounds, warm, 1, timeoutNs(), gi.elapsed, gi.timedOut);
      const std::string pair = std::to_string(i) + "<->" + std::to_string(j);
      if (!check(cudaGetLastError(), "ping-pong launch") || !wait(i, "ping-pong " + pair) ||
          !wait(j, "ping-pong " + pair))
        return false;
      unsigned long long ns = 0;
      bool to = false;
      if (!pingPongResult(gi, &ns, &to)) return false;
      if (to) {
        notes_.push_back("flag ping-pong " + pair + " timed out: flags written into a peer's memory were not seen");
        continue;
      }
      const double oneWayUs = ns / 1e3 / (rounds - warm) / 2.0;
      t_.link(i, j).measured.flagLatencyUs = oneWayUs;
      t_.link(j, i).measured.flagLatencyUs = oneWayUs;
    }
  }
  return true;
}

bool Prober::hostProbes() {
  const int rounds = std::max(20, opt_.latencyRounds), warm = rounds / 10;
  __atomic_store_n(res_.hostGo, 1u, __ATOMIC_SEQ_CST);
  const int passes = 3;
  const double bytes = static_cast<double>(opt_.hostBytes) * passes;
  for (int d = 0; d < n_; ++d) {
    Resources::PerGpu& g = res_.gpu[d];
    const int sms = std::max(1, t_.gpus[d].smCount);
    for (int write = 0; write < 2; ++write) {
      BwArgs a{};
      a.n4 = opt_.hostBytes / 16;
      a.passes = passes;
      a.write = write;
      a.src[0] = res_.hostBufDev;
      a.dst[0] = res_.hostBufDev;
      const int blocks = std::min(sms, 64 * 2);
      if (!launchBandwidth(d, a, 1, blocks) || !wait(d, write ? "host write" : "host read")) return false;
      std::vector<double> sec;
      if (!windowsOf(d, 1, blocks, &sec)) return false;
      if (sec[0] > 0) (write ? t_.gpus[d].host.writeGBps : t_.gpus[d].host.readGBps) = bytes / sec[0] / 1e9;
    }
    std::fill(res_.hostFlags, res_.hostFlags + 64, 0u);
    if (!check(cudaMemsetAsync(g.timedOut, 0, 4, g.stream), "cudaMemset")) return false;
    hostPingPongKernel<<<2, 32, 0, g.stream>>>(res_.hostFlagsDev, rounds, warm, timeoutNs(), g.elapsed, g.timedOut);
    if (!check(cudaGetLastError(), "host ping-pong launch") || !wait(d, "host flag ping-pong")) return false;
    unsigned long long ns = 0;
    bool to = false;
    if (!pingPongResult(g, &ns, &to)) return false;
    if (to) {
      notes_.push_back("host flag ping-pong on GPU " + std::to_string(d) + " timed out");
    } else {
      t_.gpus[d].host.flagRoundTripUs = ns / 1e3 / (rounds - warm);
    }
  }
  return true;
}

bool Prober::run() {
  int prev = 0;
  cudaGetDevice(&prev);
  bool ok = allocate() && hostProbes();
  if (ok && n_ > 1)
    ok = checkPairs() && concurrentBandwidth(false) && concurrentBandwidth(true) && soloReads() && latencies();
  if (!res_.hung) cudaSetDevice(prev);
  char desc[320];
  std::snprintf(desc, sizeof desc,
                "measured by arfuse's probe: peer load/store of %zu KiB checked word by word; bandwidth %zu MiB x %d "
                "passes per pair, %d-thread blocks (all pairs at once, then each pair alone); flag latency half a "
                "ping-pong round trip over %d rounds; host memory %zu MiB x 3 passes",
                opt_.checkBytes >> 10, opt_.bandwidthBytes >> 20, opt_.bandwidthPasses, kThreads,
                std::max(20, opt_.latencyRounds), opt_.hostBytes >> 20);
  t_.notes.push_back(desc);
  if (!ok) t_.notes.push_back("measurement incomplete: " + (notes_.empty() ? std::string("?") : notes_.back()));
  return ok;
}

}  // namespace

bool measureTopology(Topology* t, const ProbeOptions& opt, std::vector<std::string>* notes) {
  Prober p(t, opt, notes);
  return p.run();
}

}  // namespace topo
}  // namespace arfuse
