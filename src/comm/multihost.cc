// Groups that span hosts: init after phase A (comm/multihost.h).
//
// Sequence, every rank through every step (all decisions from the same bytes):
//   1. the host layout from phase A's hellos (init/host_layout.h); unequal hosts fail every rank;
//   2. the world NCCL communicator: rank 0's id came in its hello (arfuse's rendezvous is single
//      use) or goes round the caller's all-gather once more;
//   3. the intra-host group: the ordinary multi-process init over the L ranks of this host, its
//      phase A an all-gather over the world communicator from which each host keeps its own ranks;
//   4. round 1 over the world communicator: each rank's outcome so far, its intra-host facts (peer
//      access, CTA caps) and, for the hierarchical path, CUDA IPC handles of its copy-in and slice
//      buffers and (host 0) the NCCL id of its local index's communicator; any failure fails all;
//   5. the per-local-index NCCL communicators; the local peers' buffers mapped;
//   6. round 2: every rank's outcome of step 5; any failure fails all.
// The world all-gathers are bounded (init timeout): a rank that does not arrive aborts the NCCL
// communicator and fails init naming the timeout. NCCL's own init waits are NCCL's.
#include "comm/multihost.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "algos/registry.h"
#include "base/status.h"
#include "common/params.h"
#include "diag/records.h"
#include "init/cuda_check.h"
#include "policy/config.h"
#include "transport/mp_protocol.h"

namespace arfuse {
namespace {

using mp::Hello;

// All-gather of `bytes` per rank over the world communicator, bounded by timeoutMs.
Status worldAllGather(MultiHost* mh, const void* mine, size_t bytes, std::vector<uint8_t>* all, int timeoutMs) {
  if (!mh->world) return ARFUSE_FAIL(arfuseNcclError, "init: the NCCL communicator over every rank is gone");
  const size_t total = bytes * static_cast<size_t>(mh->nranks);
  char* d = nullptr;
  cudaStream_t s = nullptr;
  ARFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaError_t e = cudaMalloc(&d, total + bytes);
  if (e == cudaSuccess) e = cudaMemcpy(d + total, mine, bytes, cudaMemcpyHostToDevice);
  ncclResult_t nr = ncclSuccess;
  if (e == cudaSuccess) nr = ncclAllGather(d + total, d, bytes, ncclChar, mh->world, s);
  bool done = false;
  if (e == cudaSuccess && nr == ncclSuccess) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    for (;;) {
      const cudaError_t q = cudaStreamQuery(s);
      if (q == cudaSuccess) {
        done = true;
        break;
      }
      if (q != cudaErrorNotReady) {
        e = q;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  if (done) {
    all->resize(total);
    e = cudaMemcpy(all->data(), d, total, cudaMemcpyDeviceToHost);
  }
  if (!done && e == cudaSuccess && nr == ncclSuccess) {
    ncclCommAbort(mh->world);  // unblocks the all-gather; the stream can then be destroyed
    mh->world = nullptr;
  }
  cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
  if (d) cudaFree(d);
  cudaGetLastError();
  if (nr != ncclSuccess) return ARFUSE_FAIL(arfuseNcclError, "init: ncclAllGather: %s", ncclGetErrorString(nr));
  if (e != cudaSuccess) return ARFUSE_FAIL(arfuseCudaError, "init: all-gather over NCCL: %s", cudaGetErrorString(e));
  if (!done)
    return ARFUSE_FAIL(arfusePeerTimeout,
                       "init: not every rank reached the all-gather over NCCL within %d ms (a rank failed or died "
                       "earlier?)",
                       timeoutMs);
  return Status();
}

// What each rank posts in the rounds after the intra-host group exists.
struct Post {
  int32_t status;
  char text[mp::kTextBytes];
  int32_t p2p, buffers;  // intra-host peer access; the hierarchical buffers were allocated
  int32_t maxBlocks, maxBlocksWide, smCount, pdl;
  ncclUniqueId crossId;  // host 0: its local index's communicator
  cudaIpcMemHandle_t in, slices;
};

void setPost(Post* p, arfuseResult_t code, const std::string& text) {
  if (p->status != arfuseSuccess) return;
  p->status = code;
  std::snprintf(p->text, sizeof p->text, "%s", text.c_str());
}

// The first failure of a round, named by its rank, host and local rank; an ok Status if none.
Status firstFailed(const std::vector<Post>& posts, const HostLayout& l) {
  for (size_t r = 0; r < posts.size(); ++r)
    if (posts[r].status != arfuseSuccess)
      return ARFUSE_FAIL(static_cast<arfuseResult_t>(posts[r].status), "%s: %s",
                         describeRank(l, static_cast<int>(r)).c_str(),
                         std::string(posts[r].text, strnlen(posts[r].text, 240)).c_str());
  return Status();
}

Status roundTrip(MultiHost* mh, const Post& mine, std::vector<Post>* posts, int timeoutMs) {
  std::vector<uint8_t> all;
  ARFUSE_CHECK(worldAllGather(mh, &mine, sizeof mine, &all, timeoutMs));
  posts->resize(mh->nranks);
  std::memcpy(posts->data(), all.data(), all.size());
  return Status();
}

// Frees what this rank holds of the cross-host part (the intra-host group frees itself).
void releaseCrossHost(MultiHost* mh) {
  for (int q = 0; q < kMaxRanks; ++q) {
    if (mh->peerIn[q] && mh->peerIn[q] != mh->in) cudaIpcCloseMemHandle(mh->peerIn[q]);
    if (mh->peerSlices[q] && mh->peerSlices[q] != mh->slices) cudaIpcCloseMemHandle(mh->peerSlices[q]);
    mh->peerIn[q] = nullptr;
    mh->peerSlices[q] = nullptr;
  }
  if (mh->cross) ncclCommDestroy(mh->cross);
  if (mh->world) ncclCommDestroy(mh->world);
  mh->cross = mh->world = nullptr;
  for (void* p : {static_cast<void*>(mh->ncclSum), static_cast<void*>(mh->in), static_cast<void*>(mh->slices)})
    if (p) cudaFree(p);
  mh->ncclSum = mh->in = nullptr;
  mh->slices = nullptr;
  cudaGetLastError();
}

// This rank's buffers: the nccl path's output, and (with peer access, or alone on its host) the
// hierarchical path's copy-in and fp32 slice, exported for the local peers.
Status allocateBuffers(MultiHost* mh, const Group& g, Post* post) {
  const long long count = static_cast<long long>(g.limits.maxTokens) * g.limits.maxHidden;
  const size_t message = static_cast<size_t>(g.limits.maxTokens) * g.ws.maxRowBytes;
  const int L = mh->layout.localRanks;
  ARFUSE_CUDA_CHECK(cudaMalloc(&mh->ncclSum, message * (g.policy.deterministic ? mh->nranks : 1)));
  if (L > 1 && !g.fabric.p2p) return Status();  // no hierarchical path: post.buffers stays 0
  const size_t sliceBytes = static_cast<size_t>(hierarchicalSliceElems(count, L)) * sizeof(float);
  ARFUSE_CUDA_CHECK(cudaMalloc(&mh->slices, sliceBytes));
  ARFUSE_CUDA_CHECK(cudaMemset(mh->slices, 0, sliceBytes));
  if (L > 1) {
    ARFUSE_CUDA_CHECK(cudaMalloc(&mh->in, message));
    ARFUSE_CUDA_CHECK(cudaIpcGetMemHandle(&post->in, mh->in));
    ARFUSE_CUDA_CHECK(cudaIpcGetMemHandle(&post->slices, mh->slices));
  }
  post->buffers = 1;
  return Status();
}

// Step 5: this local index's NCCL communicator across hosts, and the local peers' buffers.
Status connectCrossHost(MultiHost* mh, const std::vector<Post>& posts, bool hierarchical) {
  const HostLayout& l = mh->layout;
  const ncclUniqueId id = posts[l.ranksOf[0][mh->localRank]].crossId;
  const ncclResult_t nr = ncclCommInitRank(&mh->cross, l.hosts, id, mh->hostIndex);
  if (nr != ncclSuccess) {
    mh->cross = nullptr;
    return ARFUSE_FAIL(arfuseNcclError, "init: ncclCommInitRank of local index %d across %d hosts: %s", mh->localRank,
                       l.hosts, ncclGetErrorString(nr));
  }
  if (!hierarchical) return Status();
  for (int q = 0; q < l.localRanks; ++q) {
    if (q == mh->localRank) {
      mh->peerIn[q] = mh->in;
      mh->peerSlices[q] = mh->slices;
      continue;
    }
    const Post& p = posts[l.ranksOf[mh->hostIndex][q]];
    void* in = nullptr;
    void* slices = nullptr;
    ARFUSE_CUDA_CHECK(cudaIpcOpenMemHandle(&in, p.in, cudaIpcMemLazyEnablePeerAccess));
    mh->peerIn[q] = static_cast<char*>(in);
    ARFUSE_CUDA_CHECK(cudaIpcOpenMemHandle(&slices, p.slices, cudaIpcMemLazyEnablePeerAccess));
    mh->peerSlices[q] = static_cast<float*>(slices);
  }
  return Status();
}

// Step 2: the world communicator's id (rank 0's).
Status worldId(const MultiHostInit& in, const std::vector<Hello>& h, ncclUniqueId* id) {
  if (h[0].worldNcclSet) {
    std::memcpy(id, h[0].worldNcclId, sizeof *id);
    return Status();
  }
  if (!in.reusable)
    return ARFUSE_FAIL(arfuseUnsupported,
                       "the ranks are on several hosts, but rank 0 did not prepare a group that spans hosts: run the "
                       "rendezvous over TCP (ARFUSE_BOOTSTRAP_ADDR or ARFUSE_BOOTSTRAP_IFNAME, the same on every "
                       "rank; docs/multihost.md)");
  struct IdPost {
    int32_t status;
    ncclUniqueId id;
  } mine{};
  if (in.rank == 0) mine.status = ncclGetUniqueId(&mine.id) == ncclSuccess ? 0 : 1;
  std::vector<uint8_t> all;
  ARFUSE_CHECK_PREFIXED("init: the all-gather of the NCCL id: ", (*in.reusable)(&mine, sizeof mine, &all));
  if (all.size() != sizeof mine * static_cast<size_t>(in.nranks))
    return ARFUSE_FAIL(arfuseInternalError, "init: the all-gather returned the wrong number of bytes");
  IdPost zero;
  std::memcpy(&zero, all.data(), sizeof zero);
  if (zero.status != 0) return ARFUSE_FAIL(arfuseNcclError, "init: rank 0's ncclGetUniqueId failed");
  *id = zero.id;
  return Status();
}

}  // namespace

Plan planOn(const Group& g, const PlanRequest& req) {
  if (const MultiHost* mh = g.multiHost.get()) return makePlan(mh->fabric, g.limits, mh->policy, req);
  return makePlan(g.fabric, g.limits, g.policy, req);
}
int multiHostRanks(const Group& g) { return g.multiHost->nranks; }
void* multiHostNcclSum(const Group& g) { return g.multiHost->ncclSum; }

std::string intraHostRanksText(const MultiHost& mh) {
  std::string t = strprintf("local ranks of host %s:", mh.layout.labels[mh.hostIndex].c_str());
  const std::vector<int>& rs = mh.layout.ranksOf[mh.hostIndex];
  for (size_t q = 0; q < rs.size(); ++q) t += strprintf("%s local rank %zu = rank %d", q ? "," : "", q, rs[q]);
  return t;
}

std::string multiHostErrorContext(const Group& g) {
  const MultiHost& mh = *g.multiHost;
  std::string t = intraHostRanksText(mh);
  const std::vector<int>& rs = mh.layout.ranksOf[mh.hostIndex];
  for (int q = 0; q < static_cast<int>(rs.size()) && q < kMaxRanks; ++q) {
    ErrorRecord e;
    if (q == mh.localRank) continue;  // this rank's own message names them already
    if (!readErrorRecord(*g.shared, q, &e) || e.code != kErrNcclTimeout) continue;
    t += strprintf("; local rank %d (rank %d) waited in NCCL communicator %s with: %s", q, rs[q],
                   ncclCommName(e.block).c_str(), ncclCommPeers(mh.layout, e.block, rs[q]).c_str());
  }
  return t;
}

std::vector<std::string> multiHostWatchLines(const Group& g) {
  return g.multiHost && g.multiHost->watch ? g.multiHost->watch->describe() : std::vector<std::string>();
}

bool mayNeedWorldNcclId() {
  return !paramTestHostId().empty() || !paramBootstrapAddr().empty() || !paramBootstrapIfname().empty();
}

Status createRankMultiHost(const MultiHostInit& in, arfuseComm_t* comm) {
  std::vector<Hello> h(in.nranks);
  std::memcpy(h.data(), in.hellos.data(), h.size() * sizeof(Hello));
  auto mh = std::make_shared<MultiHost>();
  mh->nranks = in.nranks;
  mh->rank = in.rank;
  {
    std::vector<uint64_t> hashes;
    std::vector<std::string> labels;
    for (const Hello& x : h) {
      hashes.push_back(x.hostHash);
      labels.emplace_back(x.hostLabel, strnlen(x.hostLabel, sizeof x.hostLabel));
    }
    mh->layout = groupHosts(hashes, labels);
  }
  const HostLayout& l = mh->layout;
  if (!l.ok()) return ARFUSE_FAIL(arfuseUnsupported, "init: %s", l.error.c_str());
  mh->hostIndex = l.hostOf[in.rank];
  mh->localRank = l.localOf[in.rank];
  const int L = l.localRanks;
  const int timeoutMs = std::max(30000, h[0].timeoutMs);
  const std::string me = describeRank(l, in.rank);

  ncclUniqueId wid;
  ARFUSE_CHECK(worldId(in, h, &wid));
  if (cudaSetDevice(in.device) != cudaSuccess)
    return ARFUSE_FAIL(arfuseCudaError, "init: cudaSetDevice(%d) failed", in.device);
  ncclResult_t nr = ncclCommInitRank(&mh->world, in.nranks, wid, in.rank);
  if (nr != ncclSuccess)
    return ARFUSE_FAIL(arfuseNcclError,
                       "init: %s: ncclCommInitRank over all %d ranks of %d hosts failed: %s (NCCL across hosts "
                       "needs one GPU per rank per NCCL host; NCCL_DEBUG=INFO says more)",
                       me.c_str(), in.nranks, l.hosts, ncclGetErrorString(nr));

  // Step 3: the intra-host group, its phase A over the world communicator.
  const int myHost = mh->hostIndex;
  Exchange sub = [&](const void* mine, size_t bytes, std::vector<uint8_t>* all) {
    std::vector<uint8_t> every;
    ARFUSE_CHECK(worldAllGather(mh.get(), mine, bytes, &every, timeoutMs));
    all->resize(bytes * static_cast<size_t>(L));
    for (int q = 0; q < L; ++q)
      std::memcpy(all->data() + q * bytes, every.data() + static_cast<size_t>(l.ranksOf[myHost][q]) * bytes, bytes);
    return Status();
  };
  arfuseComm_t inner = nullptr;
  MultiProcessOptions opt;
  opt.intraHost = true;
  const Status ist = createRankMultiProcess(L, mh->localRank, in.device, in.config, sub, &inner, opt);

  // Step 4: round 1.
  Post post{};
  setPost(&post, ist.code(), "intra-host group: " + ist.message());
  Group* g = ist.ok() ? inner->group : nullptr;
  if (g) {
    post.p2p = g->fabric.p2p ? 1 : 0;
    post.maxBlocks = g->fabric.maxBlocks;
    post.maxBlocksWide = g->fabric.maxBlocksWide > 0 ? g->fabric.maxBlocksWide : g->fabric.maxBlocks;
    post.smCount = g->fabric.smCount;
    post.pdl = g->fabric.pdl ? 1 : 0;
    std::string m;
    if (allocateBuffers(mh.get(), *g, &post).into(&m) != arfuseSuccess) setPost(&post, arfuseCudaError, m);
  }
  if (myHost == 0 && post.status == arfuseSuccess && ncclGetUniqueId(&post.crossId) != ncclSuccess)
    setPost(&post, arfuseNcclError, "ncclGetUniqueId failed");
  auto failAll = [&](Status st) {
    releaseCrossHost(mh.get());
    if (inner) destroyComm(inner);  // the failure reported is st, not the teardown's
    return st.through(__FILE__, __LINE__);
  };
  std::vector<Post> posts;
  if (Status st = roundTrip(mh.get(), post, &posts, timeoutMs); !st.ok()) return failAll(st);
  if (Status st = firstFailed(posts, l); !st.ok()) return failAll(st);

  Fabric& f = mh->fabric;
  f.nranks = in.nranks;
  f.nccl = true;  // the communicator over every rank (the nccl path), made below
  f.hosts = l.hosts;
  f.localRanks = L;
  f.hierarchical = true;
  f.maxBlocks = f.maxBlocksWide = f.smCount = 1 << 30;
  f.pdl = true;
  for (int r = 0; r < in.nranks; ++r) {
    const Post& p = posts[r];
    if (f.hierarchical && !p.buffers) {
      f.hierarchical = false;
      f.hierarchicalDetail = describeRank(l, r) + (p.p2p ? ": its buffers were not allocated"
                                                         : ": no peer access between the ranks of its host");
    }
    f.maxBlocks = std::min(f.maxBlocks, p.maxBlocks);
    f.maxBlocksWide = std::min(f.maxBlocksWide, p.maxBlocksWide);
    f.smCount = std::min(f.smCount, p.smCount);
    f.pdl = f.pdl && p.pdl;
  }

  // Steps 5 and 6.
  Post post2{};
  {
    std::string m;
    const arfuseResult_t c = connectCrossHost(mh.get(), posts, f.hierarchical).into(&m);
    setPost(&post2, c, m);
  }
  if (Status st = roundTrip(mh.get(), post2, &posts, timeoutMs); !st.ok()) return failAll(st);
  if (Status st = firstFailed(posts, l); !st.ok()) return failAll(st);

  mh->policy = g->policy;
  {
    ResolvedConfig rc;
    if (resolveConfig(in.config, in.nranks, &rc).ok()) {  // it was resolved at phase A already
      mh->policy.forcedAlgo = rc.policy.forcedAlgo;
      mh->policy.forcedBy = rc.policy.forcedBy;
    }
  }
  g->logRanks = mh->layout.ranksOf[mh->hostIndex];  // its log lines name global ranks
  MultiHost* raw = mh.get();
  g->cleanups.push_back([raw] { releaseCrossHost(raw); });
  // Runs before releaseCrossHost (cleanups run in reverse): the watchdog lets go of the watch first.
  mh->watch.reset(new MultiHostWatch(g, raw, mh->localRank, in.device));
  g->cleanups.push_back([raw] {
    watchdogUnregister(raw->watch.get());
    raw->watch.reset();
  });
  watchdogRegister(mh->watch.get());
  g->multiHost = mh;
  inner->globalRank = in.rank;
  ARFUSE_LOG(kLogInfo, inner->logContext(), "", "group spans %d hosts x %d ranks: %s; hierarchical path %s", l.hosts, L,
             me.c_str(), f.hierarchical ? "available" : ("unavailable: " + f.hierarchicalDetail).c_str());
  *comm = inner;
  return Status();
}

}  // namespace arfuse
