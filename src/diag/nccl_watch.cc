#include "diag/nccl_watch.h"

#include <algorithm>

#include "common/log.h"
#include "diag/records.h"

namespace arfuse {

void NcclWatchList::push(const NcclOpInfo& info, EventHandle before, EventHandle after, uint64_t enqueueNs) {
  Op o;
  o.info = info;
  o.before = before;
  o.after = after;
  o.enqueueNs = enqueueNs;
  ops_.push_back(std::move(o));
}

bool NcclWatchList::setAfter(uint64_t seq, EventHandle after) {
  for (Op& o : ops_)
    if (o.info.seq == seq && !o.after) {
      o.after = after;
      return true;
    }
  return false;
}

NcclWatchVerdict NcclWatchList::poll(uint64_t nowNs, const EventQuery& query, std::vector<EventHandle>* released) {
  NcclWatchVerdict v;
  for (auto it = ops_.begin(); it != ops_.end();) {
    Op& o = *it;
    if (!o.started) {
      const EventState b = query(o.before);
      if (b == EventState::kError && v.kind == NcclWatchVerdict::kNone) {
        v.kind = NcclWatchVerdict::kEventError;
        v.op = o.info;
      }
      if (b == EventState::kDone) {
        o.started = true;
        o.startNs = nowNs;
      }
    }
    if (o.started && o.after) {
      const EventState a = query(o.after);
      if (a == EventState::kDone) {
        released->push_back(o.before);
        released->push_back(o.after);
        it = ops_.erase(it);
        continue;
      }
      if (a == EventState::kError && v.kind == NcclWatchVerdict::kNone) {
        v.kind = NcclWatchVerdict::kEventError;
        v.op = o.info;
      }
    }
    // The oldest started operation past the bound wins over an event error found earlier.
    if (o.started && nowNs - o.startNs > boundNs(o.info) && v.kind != NcclWatchVerdict::kTimeout) {
      v.kind = NcclWatchVerdict::kTimeout;
      v.op = o.info;
      v.waitedNs = nowNs - o.startNs;
      v.boundNs = boundNs(o.info);
    }
    ++it;
  }
  return v;
}

void NcclWatchList::clear(std::vector<EventHandle>* released) {
  for (const Op& o : ops_) {
    if (o.before) released->push_back(o.before);
    if (o.after) released->push_back(o.after);
  }
  ops_.clear();
}

std::vector<std::string> NcclWatchList::describe(uint64_t nowNs) const {
  std::vector<std::string> out;
  for (const Op& o : ops_) {
    std::string state = o.started ? strprintf("running on the GPU for %.3f s", (nowNs - o.startNs) / 1e9)
                                  : strprintf("queued behind earlier work for %.3f s", (nowNs - o.enqueueNs) / 1e9);
    out.push_back(strprintf("nccl op %llu %s path=%s %zu B comm=%s: %s", static_cast<unsigned long long>(o.info.seq),
                            o.info.op, o.info.path, o.info.bytes, ncclCommName(o.info.comm).c_str(), state.c_str()));
  }
  return out;
}

uint64_t CapturedNcclWatch::add(const NcclOpInfo& info) {
  if (slots_.size() >= max_) return kUnknownSlot;
  slots_.push_back(info);
  slots_.back().captured = true;
  return slots_.size() - 1;
}

NcclWatchVerdict CapturedNcclWatch::poll(uint64_t nowNs, uint64_t started, uint64_t finished, uint64_t lastSlot) {
  NcclWatchVerdict v;
  if (started <= finished) {  // idle (or a copy that caught `finished` ahead of `started`)
    inFlight_ = false;
    return v;
  }
  if (!inFlight_ || finished != seenFinished_) {  // in flight from now, or progress since the last tick
    inFlight_ = true;
    seenFinished_ = finished;
    sinceNs_ = nowNs;
    return v;
  }
  NcclOpInfo op;
  if (lastSlot < slots_.size()) {
    op = slots_[lastSlot];
  } else {  // a slot the table does not know (a torn copy): the widest bound
    op.op = "an NCCL operation";
    op.path = "?";
    op.captured = true;
    for (const NcclOpInfo& s : slots_) op.peerWaitNs = std::max(op.peerWaitNs, s.peerWaitNs);
  }
  const uint64_t bound = timeoutNs_ + op.peerWaitNs;
  if (nowNs - sinceNs_ <= bound) return v;
  v.kind = NcclWatchVerdict::kTimeout;
  v.op = op;
  v.waitedNs = nowNs - sinceNs_;
  v.boundNs = bound;
  return v;
}

std::string ncclCommName(int comm) {
  return comm == kNcclCommWorld ? std::string("world") : strprintf("local index %d", comm);
}

std::string describeNcclTimeout(const NcclOpInfo& op, uint64_t waitedNs, uint64_t timeoutNs, const std::string& peers) {
  std::string what =
      strprintf("%s, path %s, %zu B, communicator %s", op.op, op.path, op.bytes, ncclCommName(op.comm).c_str());
  if (!callDescEmpty(op.desc)) what += ", in " + describeCallDesc(op.desc, false);
  const std::string bound =
      op.peerWaitNs ? strprintf("bound %.3f s: the timeout %.3f s + %.3f s for the peers' own bounded wait before it",
                                (timeoutNs + op.peerWaitNs) / 1e9, timeoutNs / 1e9, op.peerWaitNs / 1e9)
                    : strprintf("timeout %.3f s", timeoutNs / 1e9);
  const char* replay =
      op.captured ? "in a CUDA-graph replay: no captured operation of this rank finished for that long while it ran; "
                  : "";
  return strprintf(
      "NCCL operation %llu across hosts (%s) did not finish %.3f s after it started on the GPU (%s%s); "
      "it waits with: %s. NCCL does not say which of them stopped: the rank(s) that do not report this same "
      "timeout (dead, hung, or making other calls) are the ones. This rank's NCCL communicators are aborted and "
      "the group is aborted",
      static_cast<unsigned long long>(op.seq), what.c_str(), waitedNs / 1e9, replay, bound.c_str(), peers.c_str());
}

std::string ncclTimeoutNextStep() {
  return "find the rank(s) named above that did not report this timeout and read their logs (a crash, an OOM "
         "kill, a rank that skipped or reordered a call); check the network between the hosts (NCCL_DEBUG=WARN "
         "names a failed connection); then destroy and recreate the communicators on every rank (the job's "
         "restart); a longer ARFUSE_TIMEOUT_MS helps only if the calls were legitimately that slow";
}

}  // namespace arfuse
