// The bounded wait of a group that spans hosts: every NCCL operation arfuse enqueues across hosts
// goes through MultiHostWatch::issue, which brackets it with events and a guard (the pure logic:
// diag/nccl_watch.h), and the process's watchdog thread (diag/watchdog.h) ticks the watch.
//
// On a timeout (an operation that started on the GPU more than the group's timeout ago and has not
// finished), on the watchdog thread:
//   1. the error: this rank's ErrorRecord (kErrNcclTimeout, in the intra-host group's host-mapped
//      area, so the other local ranks of this host report it too), and the group's host error
//      (raiseHostError: the message with the operation, how long it ran and the ranks it waits
//      with; one ERROR line; the host-mapped abort word);
//   2. the device abort words of this rank (and, with peer access, of its local peers), so every
//      later arfuse kernel of the group -- CUDA-graph replays too -- is refused and writes NaN;
//   3. ncclCommAbort of this rank's NCCL communicators across hosts (the one over every rank and
//      its local index's): NCCL's kernels then exit, and the stream moves on; the guard kernel
//      behind each NCCL operation sees the abort and fills the operation's output with NaN.
// The next API call of the rank, arfuseCommGetAsyncError and arfuseCommGetLastError then report
// it. ncclCommAbort runs only while no arfuse call of this rank is inside an NCCL host call (a
// mutex): if the caller's thread is stuck in one (NCCL connecting to a peer that is gone), steps
// 1-2 happen at the timeout and the NCCL abort when that call returns.
//
// Operations enqueued during CUDA-graph capture have no per-replay events: a stamp kernel before
// each and its guard after it count into device counters that every tick copies out (on the rank's
// aux stream), judged by CapturedNcclWatch (diag/nccl_watch.h); with ARFUSE_NCCL_WATCH_GRAPHS=0 (on
// by default) they are only guarded (the guard runs at every replay). Not watched: NCCL's own init
// (ncclCommInitRank). Documented in docs/multihost.md.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "diag/device_records.h"
#include "diag/nccl_watch.h"
#include "diag/watchdog.h"

namespace arfuse {

struct Group;
struct MultiHost;

// One NCCL operation across hosts, as its caller describes it.
struct NcclIssue {
  NcclOpInfo info;  // seq is filled by the watch
  cudaStream_t stream = nullptr;
  bool grouped = false;    // inside an NCCL group: the "after" event and the guard wait for finishGroupedNccl
  void* output = nullptr;  // what the guard fills with NaN when the group has aborted
  size_t outputBytes = 0;
};

class MultiHostWatch : public WatchSource {
 public:
  MultiHostWatch(Group* g, MultiHost* mh, int localRank, int device);
  ~MultiHostWatch() override;  // unregister first; frees the events
  std::vector<DumpInput> snapshot() const override { return {}; }
  int tickMs() const override { return tickMs_; }
  void tick() override;

  // Issues `call` on the communicator op.info.comm names, watched (eager calls) or only guarded
  // (during capture). Refused once the watch has aborted the group.
  Status issue(const NcclIssue& op, const std::function<ncclResult_t(ncclComm_t)>& call);
  // The end of the NCCL group that held grouped operations of this watch on this thread; `counted`:
  // a captured operation whose guard counts it finished.
  void finishGrouped(uint64_t seq, cudaStream_t stream, void* output, size_t outputBytes, bool counted);
  // One line per watched operation still in flight, and the abort if any (the state dump).
  std::vector<std::string> describe();
  bool aborted() const { return raised_.load(); }
  // How long an operation like `info` may run on the GPU before the watch calls it a timeout.
  uint64_t boundNs(const NcclOpInfo& info) const { return list_.boundNs(info); }

 private:
  cudaEvent_t takeEvent();
  void timeout(const NcclWatchVerdict& v);
  // Captured operations: copies the counters out (bounded by one tick) and judges them.
  NcclWatchVerdict pollCaptured(uint64_t nowNs);
  void hostBlocked(uint64_t blockedNs);
  void raise(arfuseResult_t code, const std::string& text, const std::string& fields, const ErrorRecord* rec);
  void abortNccl();

  Group* g_;
  MultiHost* mh_;
  int localRank_, device_, tickMs_;
  std::mutex commMu_;  // an arfuse call inside an NCCL host call of mh_'s communicators, or their abort
  std::mutex listMu_;  // list_ and free_
  NcclWatchList list_;
  CapturedNcclWatch captured_;                  // under listMu_
  unsigned long long* counters_ = nullptr;      // device: started, finished, last started slot (null: off)
  unsigned long long* countersHost_ = nullptr;  // pinned: their copy (watchdog thread)
  std::vector<cudaEvent_t> free_;
  uint64_t unwatched_ = 0;  // under listMu_
  std::atomic<uint64_t> seq_{0};
  std::atomic<uint64_t> hostCallSeq_{0};
  std::atomic<int> hostCallComm_{0};        // the communicator of that call: 0 world, 1 cross
  std::atomic<uint64_t> hostCallSince_{0};  // steady-clock ns when the caller's thread entered NCCL; 0: not in it
  std::atomic<bool> raised_{false};         // the watch raised the group's error
  bool ncclAborted_ = false;                // under commMu_
  int firstAbort_ = 0;  // which communicator abortNccl aborts first: 0 world, 1 cross (the stuck one)
  // Watchdog thread only:
  bool pendingNcclAbort_ = false;
  bool ncclAbortDone_ = false;
  bool eventErrorLogged_ = false;
  std::string abortText_;  // written once, before raised_
};

// Grouped operations of this thread (api/enqueue.cc arfuseGroupEnd): each NCCL group end records the
// "after" events and guards of the operations issued since the group's start.
void noteGroupedNccl(MultiHostWatch* w, uint64_t seq, cudaStream_t stream, void* output, size_t outputBytes,
                     bool counted);
void finishGroupedNccl();

}  // namespace arfuse
