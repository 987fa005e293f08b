// The watch of a group that spans hosts (comm/multihost_watch.h): events around every NCCL
// operation across hosts, their polling on the watchdog thread, and the abort on a timeout.
#include "comm/multihost_watch.h"

#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "comm/multihost.h"
#include "comm/nccl_guard.h"
#include "common/params.h"
#include "diag/records.h"
#include "init/cuda_check.h"
#include "init/group.h"

namespace arfuse {
namespace {

// Watched operations in flight per rank at most; beyond (the caller is thousands of calls ahead of
// its GPU) an operation is only guarded, and the dump says how many were.
constexpr size_t kMaxWatched = 4096;

uint64_t steadyNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// The watchdog thread queries events of streams that another thread may be capturing into a CUDA
// graph: in the thread-local capture mode its queries never invalidate that capture.
struct ThreadLocalCaptureMode {
  cudaStreamCaptureMode saved = cudaStreamCaptureModeThreadLocal;
  ThreadLocalCaptureMode() { cudaThreadExchangeStreamCaptureMode(&saved); }
  ~ThreadLocalCaptureMode() { cudaThreadExchangeStreamCaptureMode(&saved); }
};

EventState queryEvent(EventHandle h) {
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(h));
  if (e == cudaSuccess) return EventState::kDone;
  cudaGetLastError();
  return e == cudaErrorNotReady ? EventState::kPending : EventState::kError;
}

bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &st) != cudaSuccess) {
    cudaGetLastError();
    return true;  // cannot tell: do not record events into what may be a graph
  }
  return st != cudaStreamCaptureStatusNone;
}

struct Pending {
  MultiHostWatch* watch;
  uint64_t seq;
  cudaStream_t stream;
  void* output;
  size_t bytes;
  bool counted;
};
thread_local std::vector<Pending> tPending;

}  // namespace

MultiHostWatch::MultiHostWatch(Group* g, MultiHost* mh, int localRank, int device)
    : g_(g), mh_(mh), localRank_(localRank), device_(device), list_(g->timeoutNs), captured_(g->timeoutNs) {
  const uint64_t ms = g->timeoutNs / 1000000ull;
  tickMs_ = static_cast<int>(std::max<uint64_t>(10, std::min<uint64_t>(100, ms / 20)));
  if (paramNcclWatchGraphs()) {  // captured operations' counters (diag/nccl_watch.h CapturedNcclWatch)
    DeviceScope on(device_);
    constexpr size_t kBytes = 3 * sizeof(unsigned long long);
    if (cudaMalloc(&counters_, kBytes) != cudaSuccess || cudaMemset(counters_, 0, kBytes) != cudaSuccess ||
        cudaMallocHost(&countersHost_, kBytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
      cudaGetLastError();
      ARFUSE_LOG(kLogWarn, rankLogContext(*g_, localRank_), "",
                 "ARFUSE_NCCL_WATCH_GRAPHS: no memory for the captured operations' counters; NCCL operations "
                 "across hosts inside CUDA graphs stay unbounded (only guarded)");
      if (counters_) cudaFree(counters_);
      if (countersHost_) cudaFreeHost(countersHost_);
      counters_ = nullptr;
      countersHost_ = nullptr;
    }
  }
}

MultiHostWatch::~MultiHostWatch() {
  DeviceScope on(device_);
  std::vector<EventHandle> all;
  std::lock_guard<std::mutex> lock(listMu_);
  list_.clear(&all);
  for (EventHandle e : all) free_.push_back(static_cast<cudaEvent_t>(e));
  for (cudaEvent_t e : free_) cudaEventDestroy(e);  // one still pending is released once it completes
  free_.clear();
  if (counters_) cudaFree(counters_);
  if (countersHost_) cudaFreeHost(countersHost_);
  cudaGetLastError();
}

cudaEvent_t MultiHostWatch::takeEvent() {
  {
    std::lock_guard<std::mutex> lock(listMu_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return e;
}

Status MultiHostWatch::issue(const NcclIssue& in, const std::function<ncclResult_t(ncclComm_t)>& call) {
  NcclOpInfo info = in.info;
  info.seq = ++seq_;
  std::lock_guard<std::mutex> comm(commMu_);
  if (raised_.load() || ncclAborted_)
    return ARFUSE_FAIL(arfusePeerTimeout, "refused: the group was aborted: %s", abortText_.c_str());
  ncclComm_t nc = info.comm == kNcclCommWorld ? mh_->world : mh_->cross;
  if (!nc)
    return ARFUSE_FAIL(arfuseNcclError, "the NCCL communicator %s across hosts is gone",
                       ncclCommName(info.comm).c_str());
  const bool capture = capturing(in.stream);
  bool watched = !capture;
  const bool counted = capture && counters_;  // captured: counted by its stamp and guard
  uint64_t slot = CapturedNcclWatch::kUnknownSlot;
  {
    std::lock_guard<std::mutex> lock(listMu_);
    if (watched) watched = list_.size() < kMaxWatched;
    if (counted) slot = captured_.add(info);
    if (!watched && !counted) ++unwatched_;
  }
  unsigned long long* finished = counted ? counters_ + 1 : nullptr;
  if (counted) {
    const cudaError_t e = launchNcclStamp(counters_, static_cast<unsigned long long>(slot), in.stream);
    if (e != cudaSuccess)
      return ARFUSE_FAIL(arfuseCudaError, "the stamp before %s across hosts: %s", info.op, cudaGetErrorString(e));
  }
  cudaEvent_t before = watched ? takeEvent() : nullptr;
  cudaEvent_t after = watched && !in.grouped ? takeEvent() : nullptr;
  if (watched && (!before || (!in.grouped && !after) || cudaEventRecord(before, in.stream) != cudaSuccess)) {
    cudaGetLastError();
    std::lock_guard<std::mutex> lock(listMu_);
    for (cudaEvent_t e : {before, after})
      if (e) free_.push_back(e);
    before = after = nullptr;
    watched = false;
    ++unwatched_;
  }
  hostCallSeq_.store(info.seq);
  hostCallComm_.store(info.comm == kNcclCommWorld ? 0 : 1);
  hostCallSince_.store(steadyNs());
  const ncclResult_t nr = call(nc);
  hostCallSince_.store(0);
  if (nr != ncclSuccess) {
    // A stamped operation keeps its count even so: an unmatched stamp would read as one in flight.
    if (finished) launchNcclGuard(&g_->sharedDev->abort, in.output, in.outputBytes, in.stream, finished);
    std::lock_guard<std::mutex> lock(listMu_);
    for (cudaEvent_t e : {before, after})
      if (e) free_.push_back(e);
    return ARFUSE_FAIL(arfuseNcclError, "%s across hosts (communicator %s, path %s): %s", info.op,
                       ncclCommName(info.comm).c_str(), info.path, ncclGetErrorString(nr));
  }
  if (in.grouped) {
    noteGroupedNccl(this, info.seq, in.stream, in.output, in.outputBytes, finished != nullptr);
  } else {
    if (after) cudaEventRecord(after, in.stream);
    const cudaError_t e = launchNcclGuard(&g_->sharedDev->abort, in.output, in.outputBytes, in.stream, finished);
    if (e != cudaSuccess)
      return ARFUSE_FAIL(arfuseCudaError, "the guard after %s across hosts: %s", info.op, cudaGetErrorString(e));
  }
  if (watched) {
    std::lock_guard<std::mutex> lock(listMu_);
    list_.push(info, before, after, steadyNs());
  }
  return Status();
}

void MultiHostWatch::finishGrouped(uint64_t seq, cudaStream_t stream, void* output, size_t outputBytes, bool counted) {
  if (!capturing(stream)) {
    cudaEvent_t after = takeEvent();
    bool used = false;
    if (after && cudaEventRecord(after, stream) == cudaSuccess) {
      std::lock_guard<std::mutex> lock(listMu_);
      used = list_.setAfter(seq, after);
    }
    if (after && !used) {
      std::lock_guard<std::mutex> lock(listMu_);
      free_.push_back(after);
    }
  }
  launchNcclGuard(&g_->sharedDev->abort, output, outputBytes, stream, counted ? counters_ + 1 : nullptr);
  cudaGetLastError();
}

NcclWatchVerdict MultiHostWatch::pollCaptured(uint64_t nowNs) {
  {
    std::lock_guard<std::mutex> lock(listMu_);
    if (!counters_ || captured_.size() == 0) return NcclWatchVerdict();
  }
  const RankResources& rr = g_->ranks[localRank_];
  if (!rr.aux) return NcclWatchVerdict();
  // A copy engine copies while an NCCL kernel spins; a device that cannot copy at all leaves no verdict.
  if (cudaMemcpyAsync(countersHost_, counters_, 3 * sizeof(unsigned long long), cudaMemcpyDeviceToHost, rr.aux) !=
      cudaSuccess) {
    cudaGetLastError();
    return NcclWatchVerdict();
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(tickMs_);
  cudaError_t q;
  while ((q = cudaStreamQuery(rr.aux)) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  cudaGetLastError();
  if (q != cudaSuccess) return NcclWatchVerdict();
  const volatile unsigned long long* c = countersHost_;
  std::lock_guard<std::mutex> lock(listMu_);
  return captured_.poll(nowNs, c[0], c[1], c[2]);
}

void MultiHostWatch::tick() {
  if (ncclAbortDone_) return;
  DeviceScope on(device_);
  ThreadLocalCaptureMode mode;
  const uint64_t now = steadyNs();
  if (pendingNcclAbort_) {
    abortNccl();
    return;
  }
  NcclWatchVerdict v;
  {
    std::vector<EventHandle> released;
    std::lock_guard<std::mutex> lock(listMu_);
    v = list_.poll(now, queryEvent, &released);
    for (EventHandle e : released) free_.push_back(static_cast<cudaEvent_t>(e));
  }
  if (raised_.load()) return;
  if (v.kind != NcclWatchVerdict::kTimeout) {
    const NcclWatchVerdict c = pollCaptured(now);
    if (c.kind == NcclWatchVerdict::kTimeout) v = c;
  }
  if (v.kind == NcclWatchVerdict::kTimeout) {
    timeout(v);
    return;
  }
  if (v.kind == NcclWatchVerdict::kEventError && !eventErrorLogged_) {
    eventErrorLogged_ = true;
    ARFUSE_LOG(kLogWarn, rankLogContext(*g_, localRank_), "path=nccl",
               "cudaEventQuery failed on the events around NCCL operation %llu across hosts (%s): the device or "
               "its context failed; the next arfuse call reports the CUDA error",
               static_cast<unsigned long long>(v.op.seq), v.op.op);
  }
  const uint64_t since = hostCallSince_.load();
  if (since && now > since && now - since > list_.timeoutNs()) hostBlocked(now - since);
}

void MultiHostWatch::timeout(const NcclWatchVerdict& v) {
  const uint64_t timeoutNs = list_.timeoutNs();
  const std::string peers = ncclCommPeers(mh_->layout, v.op.comm, mh_->rank);
  const std::string text = describeNcclTimeout(v.op, v.waitedNs, timeoutNs, peers) + "; next: " + ncclTimeoutNextStep();
  const std::string fields = strprintf("nccl_op=%llu nccl_call=%s path=%s bytes=%zu nccl_comm=%s waited_ms=%llu",
                                       static_cast<unsigned long long>(v.op.seq), v.op.op, v.op.path, v.op.bytes,
                                       v.op.comm == kNcclCommWorld ? "world" : strprintf("%d", v.op.comm).c_str(),
                                       static_cast<unsigned long long>(v.waitedNs / 1000000ull));
  ErrorRecord rec{};
  rec.code = kErrNcclTimeout;
  rec.peer = -1;
  rec.block = v.op.comm;
  rec.phase = kPhaseNcclAcrossHosts;
  rec.waitedMs = static_cast<int>(std::min<uint64_t>(v.waitedNs / 1000000ull, 1u << 30));
  rec.call = v.op.seq;
  rec.mine = v.op.desc;
  raise(arfusePeerTimeout, text, fields, &rec);
  firstAbort_ = v.op.comm == kNcclCommWorld ? 0 : 1;
  abortNccl();
}

void MultiHostWatch::hostBlocked(uint64_t blockedNs) {
  const unsigned long long seq = hostCallSeq_.load();
  const std::string text = strprintf(
      "NCCL operation %llu across hosts: the host call into NCCL has not returned after %.3f s (timeout %.3f s): "
      "NCCL's host side is blocked, typically connecting to a peer that is gone (ranks of the group: %s). The "
      "group is aborted now; this rank's NCCL communicators are aborted once that call returns; next: %s",
      seq, blockedNs / 1e9, list_.timeoutNs() / 1e9, ncclCommPeers(mh_->layout, kNcclCommWorld, mh_->rank).c_str(),
      ncclTimeoutNextStep().c_str());
  raise(arfusePeerTimeout, text,
        strprintf("nccl_op=%llu host_blocked_ms=%llu", seq, static_cast<unsigned long long>(blockedNs / 1000000ull)),
        nullptr);
  firstAbort_ = hostCallComm_.load();  // the communicator of the blocked host call goes first
  pendingNcclAbort_ = true;
}

void MultiHostWatch::raise(arfuseResult_t code, const std::string& text, const std::string& fields,
                           const ErrorRecord* rec) {
  abortText_ = text;
  raised_.store(true);
  GroupShared* s = g_->shared;
  // A kernel of this rank that failed first (an intra-host wait for a local peer that died, before
  // this rank's NCCL operation could start) left the cause: it stays what this rank reports.
  ErrorRecord earlier{};
  const bool afterRecord = s && readErrorRecord(*s, localRank_, &earlier);
  // The record first: the other local ranks of this host (other processes) read it from there.
  if (rec && s && !afterRecord) writeHostErrorRecord(s, localRank_, *rec);  // printed below, with its whole text
  raiseHostError(*g_, localRank_, code, text, fields, __FILE__, __LINE__, afterRecord);
  // The device abort words: this rank's (its own error claimed too, so that no kernel of it
  // overwrites the record) and, with peer access, every local peer's, as a failing kernel does.
  static const uint32_t kSet[2] = {1u, 1u};
  const RankResources& rr = g_->ranks[localRank_];
  if (rr.control && rr.aux) {
    cudaMemcpyAsync(&rr.control->state.abort, kSet, sizeof kSet, cudaMemcpyHostToDevice, rr.aux);
    if (g_->fabric.p2p)
      for (int p = 0; p < g_->nranks; ++p)
        if (p != localRank_ && g_->peers.control[p])
          cudaMemcpyAsync(&g_->peers.control[p]->state.abort, kSet, sizeof kSet[0], cudaMemcpyHostToDevice, rr.aux);
    g_->deviceAbortSet.store(true);
  }
  cudaGetLastError();
}

void MultiHostWatch::abortNccl() {
  std::unique_lock<std::mutex> comm(commMu_, std::try_to_lock);
  if (!comm.owns_lock()) {  // the caller's thread is inside an NCCL host call: the next tick retries
    pendingNcclAbort_ = true;
    return;
  }
  pendingNcclAbort_ = false;
  ncclAborted_ = true;
  // NCCL's kernels of these communicators exit; their streams move on (the guards write NaN).
  // The communicator whose operation is stuck goes first: ncclCommAbort sets its own abort flag,
  // then frees its memory, which waits for the device -- so aborting the other one first waits
  // forever for the stuck kernel (the hierarchical path's operation is on `cross`).
  ncclComm_t* order[2] = {&mh_->world, &mh_->cross};
  if (firstAbort_ == 1) std::swap(order[0], order[1]);
  for (ncclComm_t* c : order)
    if (*c) {
      ncclCommAbort(*c);
      *c = nullptr;
    }
  std::vector<EventHandle> all;
  std::lock_guard<std::mutex> lock(listMu_);
  list_.clear(&all);
  for (EventHandle e : all) free_.push_back(static_cast<cudaEvent_t>(e));
  ncclAbortDone_ = true;
}

std::vector<std::string> MultiHostWatch::describe() {
  std::vector<std::string> out;
  {
    std::lock_guard<std::mutex> lock(listMu_);
    out = list_.describe(steadyNs());
    if (unwatched_)
      out.push_back(
          strprintf("%llu NCCL operations across hosts were not watched (captured into a CUDA graph, or "
                    "too many in flight)",
                    static_cast<unsigned long long>(unwatched_)));
  }
  if (raised_.load()) out.push_back("aborted: " + abortText_);
  return out;
}

void noteGroupedNccl(MultiHostWatch* w, uint64_t seq, cudaStream_t stream, void* output, size_t outputBytes,
                     bool counted) {
  tPending.push_back(Pending{w, seq, stream, output, outputBytes, counted});
}

void finishGroupedNccl() {
  std::vector<Pending> p;
  p.swap(tPending);
  for (const Pending& x : p) x.watch->finishGrouped(x.seq, x.stream, x.output, x.bytes, x.counted);
}

}  // namespace arfuse
