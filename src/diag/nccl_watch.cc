#include "diag/nccl_watch.h"

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
  return strprintf(
      "NCCL operation %llu across hosts (%s) did not finish %.3f s after it started on the GPU (%s); "
      "it waits with: %s. NCCL does not say which of them stopped: the rank(s) that do not report this same "
      "timeout (dead, hung, or making other calls) are the ones. This rank's NCCL communicators are aborted and "
      "the group is aborted",
      static_cast<unsigned long long>(op.seq), what.c_str(), waitedNs / 1e9, bound.c_str(), peers.c_str());
}

std::string ncclTimeoutNextStep() {
  return "find the rank(s) named above that did not report this timeout and read their logs (a crash, an OOM "
         "kill, a rank that skipped or reordered a call); check the network between the hosts (NCCL_DEBUG=WARN "
         "names a failed connection); then destroy and recreate the communicators on every rank (the job's "
         "restart); a longer ARFUSE_TIMEOUT_MS helps only if the calls were legitimately that slow";
}

}  // namespace arfuse
