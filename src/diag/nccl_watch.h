// The bounded wait of the NCCL operations arfuse enqueues for a group that spans hosts: the pure
// part (no CUDA; CPU-tested with a fake clock and fake events, tests/cpu/diag_nccl_watch_test.cc).
//
// NCCL's kernels wait for their peers without a bound: a rank on another host that died or stopped
// calling leaves them spinning forever. So every NCCL operation arfuse itself enqueues across hosts
// (the nccl path's ncclAllReduce / ncclAllGather over every rank, the hierarchical path's
// ncclAllReduce over the ranks of one local index) is bracketed by two events on its stream,
// "before" and "after". A watchdog tick (diag/watchdog.h) polls them: an operation *starts* when
// its "before" event has completed (the GPU reached it: earlier work on the stream does not count
// against the bound), and ends when its "after" event has completed. An operation started more
// than its bound ago and not ended is a timeout (comm/multihost_watch.cc then aborts NCCL and the
// group). The bound is the group's timeout plus the operation's peerWaitNs: the time its peers may
// legitimately spend in a bounded wait of their own before they enter it (the hierarchical path's
// ranks enter its all-reduce after an intra-host barrier bounded by the timeout; without the margin,
// a rank whose local peer died gives up on that barrier just as the other hosts' ranks give up on
// it, and they name the wrong rank). The start is the first tick that sees "before" complete, so a timeout fires
// between timeout and timeout + one poll period after the real start.
//
// Inside arfuseGroupStart/End the NCCL kernel launches at the NCCL group's end, after the call
// returned: the "after" event is recorded then (NcclWatchList::setAfter); until it is, the
// operation cannot end.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "diag/device_records.h"

namespace arfuse {

// Which NCCL communicator of a group that spans hosts: the one over every rank, or local index j's.
constexpr int kNcclCommWorld = -1;

// What one watched NCCL operation is, for the message.
struct NcclOpInfo {
  uint64_t seq = 0;           // 1-based number of this rank's NCCL operations across hosts
  const char* op = "";        // "ncclAllReduce", "ncclAllGather"
  const char* path = "";      // "nccl", "hierarchical"
  size_t bytes = 0;           // bytes this rank sends (the NCCL call's count x its dtype's size)
  int comm = kNcclCommWorld;  // kNcclCommWorld, or the local index j of the communicator across hosts
  CallDesc desc{};            // the arfuse call it belongs to (empty: unknown)
  uint64_t peerWaitNs = 0;    // a peer's bounded wait before it enters the operation (added to the bound)
  bool captured = false;      // enqueued during CUDA-graph capture (watched by CapturedNcclWatch)
};

enum class EventState { kPending, kDone, kError };
// Event handles are opaque to the list (cudaEvent_t in the library, integers in the tests).
using EventHandle = void*;
using EventQuery = std::function<EventState(EventHandle)>;

struct NcclWatchVerdict {
  enum Kind { kNone, kTimeout, kEventError } kind = kNone;
  NcclOpInfo op;
  uint64_t waitedNs = 0;  // kTimeout: since the operation started on the GPU
  uint64_t boundNs = 0;   // kTimeout: the operation's bound (the timeout + op.peerWaitNs)
};

class NcclWatchList {
 public:
  explicit NcclWatchList(uint64_t timeoutNs) : timeoutNs_(timeoutNs) {}
  // A new operation; `after` may be null (grouped: setAfter follows). enqueueNs: host time now.
  void push(const NcclOpInfo& info, EventHandle before, EventHandle after, uint64_t enqueueNs);
  // Gives the operation `seq` its "after" event (grouped calls, at the NCCL group's end).
  bool setAfter(uint64_t seq, EventHandle after);
  // One tick at host time nowNs: marks started operations, drops ended ones (their events go to
  // *released, for reuse), and returns the first timeout (the oldest started operation past the
  // bound) or event error, else kNone. Operations are independent: they may be on several streams.
  NcclWatchVerdict poll(uint64_t nowNs, const EventQuery& query, std::vector<EventHandle>* released);
  // Every operation's events (after a timeout nothing ends any more: the caller frees them).
  void clear(std::vector<EventHandle>* released);
  size_t size() const { return ops_.size(); }
  uint64_t timeoutNs() const { return timeoutNs_; }
  uint64_t boundNs(const NcclOpInfo& op) const { return timeoutNs_ + op.peerWaitNs; }
  // A line per operation still watched, for the state dump:
  //   "nccl op 17 ncclAllReduce path=nccl 14336 B comm=world: running on the GPU for 1.250 s"
  std::vector<std::string> describe(uint64_t nowNs) const;

 private:
  struct Op {
    NcclOpInfo info;
    EventHandle before = nullptr, after = nullptr;
    bool started = false;
    uint64_t startNs = 0, enqueueNs = 0;
  };
  uint64_t timeoutNs_;
  std::deque<Op> ops_;
};

// Operations enqueued during CUDA-graph capture have no events the host could query per replay
// (an event recorded in a graph stays complete from the previous replay until the node runs again).
// So each such operation is bracketed by two one-thread kernels in the graph: a stamp before it
// adds 1 to `started` (and writes the operation's slot), the guard after it adds 1 to `finished`,
// both counters in the rank's device memory, which the watchdog copies out every tick. The host
// sees only those numbers: an operation is in flight while started > finished, and the verdict is
// a timeout once operations have been in flight while `finished` did not move for longer than the
// bound of the last started one (the timeout + its peerWaitNs), counted from the first tick that
// saw it so. Conservative: while any captured operation of the rank still finishes, none times out.
class CapturedNcclWatch {
 public:
  // What a stamp writes when the table is full: the operation is counted all the same (an engine
  // captures a graph per batch size, thousands of operations), only the message cannot name it.
  static constexpr uint64_t kUnknownSlot = ~uint64_t{0};
  explicit CapturedNcclWatch(uint64_t timeoutNs, size_t maxSlots = 16384) : timeoutNs_(timeoutNs), max_(maxSlots) {}
  // A new captured operation; its slot, or kUnknownSlot when the table is full.
  uint64_t add(const NcclOpInfo& info);
  size_t size() const { return slots_.size(); }
  // One tick with the counters as copied at nowNs.
  NcclWatchVerdict poll(uint64_t nowNs, uint64_t started, uint64_t finished, uint64_t lastSlot);

 private:
  uint64_t timeoutNs_;
  size_t max_;
  std::vector<NcclOpInfo> slots_;
  bool inFlight_ = false;
  uint64_t seenFinished_ = 0, sinceNs_ = 0;
};

// "world" or "local index 1".
std::string ncclCommName(int comm);
// The message of a timeout, e.g.
//   NCCL operation 17 across hosts (ncclAllReduce, path nccl, 14336 B, communicator world, in
//   AllReduceAddRmsNorm bf16 tokens=1 hidden=7168) did not finish 3.012 s after it started on the
//   GPU (timeout 3.000 s); it waits with: <peers>. (With op.peerWaitNs: "(bound 6.000 s: the
//   timeout 3.000 s + 3.000 s for the peers' own bounded wait before it)".) NCCL does not say which of them stopped:
//   the rank(s) that did not report this same timeout (dead, hung, or making other calls) are the ones; NCCL's
//   communicators of this rank are aborted and the group is aborted
std::string describeNcclTimeout(const NcclOpInfo& op, uint64_t waitedNs, uint64_t timeoutNs, const std::string& peers);
// The "next:" advice for it.
std::string ncclTimeoutNextStep();

}  // namespace arfuse
