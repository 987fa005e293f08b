// The cross-rank analyses run by Analyzer::finish(): who is the laggard of a c10d watchdog timeout,
// whom the arfuse peer timeouts wait for, which rank of a multi-host NCCL watch is silent, what the
// flight-recorder dumps and error records say about the stuck or divergent rank.
#include <algorithm>
#include <iterator>
#include <sstream>

#include "analyzer.h"
#include "analyzer_state.h"
#include "text.h"

namespace arfuse {
namespace triage {

namespace {

// The value most ranks share.
long modeOf(const std::map<int, long>& byRank) {
  std::map<long, int> freq;
  for (const auto& [r, v] : byRank) ++freq[v];
  long best = 0;
  int n = -1;
  for (const auto& [v, c] : freq)
    if (c > n) {
      best = v;
      n = c;
    }
  return best;
}

}  // namespace

// c10d watchdog: every rank that timed out reports the SeqNum of the collective it was stuck in.
// The rank that is behind (lowest / odd SeqNum, or lowest "last completed") is the one the others
// waited for; ranks that never reported are suspects too.
void Analyzer::analyseWatchdog(Result* r) {
  const std::map<int, long>& src = !lastCompletedByRank_.empty() ? lastCompletedByRank_ : seqByRank_;
  if (src.empty()) return;
  const char* what = !lastCompletedByRank_.empty() ? "last completed NCCL work" : "SeqNum at timeout";
  long mode = modeOf(src);
  long lowest = src.begin()->second;
  for (const auto& [rk, v] : src) lowest = std::min(lowest, v);
  std::set<int> low, odd;
  for (const auto& [rk, v] : src) {
    if (v == lowest) low.insert(rk);
    if (v != mode) odd.insert(rk);
  }
  std::ostringstream by;
  int shown = 0;
  for (const auto& [rk, v] : src) {
    if (shown++ == 16) {
      by << " ...";
      break;
    }
    by << (shown > 1 ? " " : "") << rk << ":" << v;
  }
  std::set<int> silent;
  if (r->nranks > 0)
    for (int k = 0; k < r->nranks; ++k)
      if (!seqByRank_.count(k) && !lastCompletedByRank_.count(k)) silent.insert(k);
  std::string headline, laggard;
  if (low.size() == 1 && src.size() > 1) {
    laggard = std::to_string(*low.begin());
    headline = "rank " + laggard + " is behind: its " + what + " is " + std::to_string(lowest) + " while " +
               (odd.size() == 1 ? "the other ranks are at " + std::to_string(mode) : "others are further");
  } else if (!odd.empty() && odd.size() < src.size() / 2 + 1 && low.size() != src.size()) {
    laggard = rankList(low);
    headline = "ranks " + laggard + " are behind (" + what + " " + std::to_string(lowest) + " vs " +
               std::to_string(mode) + ")";
  } else if (!silent.empty()) {
    laggard = rankList(silent);
    headline = "every reporting rank is at " + std::to_string(mode) + "; rank" + (silent.size() > 1 ? "s " : " ") +
               laggard + " reported no timeout: likely stuck (or dead) before the collective";
  } else {
    headline = "all ranks report " + std::string(what) + " " + std::to_string(mode) +
               ": no single laggard; the collective itself hung (or one rank is stuck inside it)";
  }
  for (auto& g : groups_) {
    if (catalog_.sig(g.sig).id != "c10d.watchdog_timeout" && catalog_.sig(g.sig).id != "c10d.last_completed") continue;
    g.setDetail("headline", headline);
    if (!laggard.empty()) g.setDetail("laggard_rank", laggard);
    g.setDetail("by_rank", by.str());
    if (!silent.empty() && laggard != rankList(silent))
      g.notes.push_back("no watchdog report from rank(s) " + rankList(silent) + ": capture their logs too");
  }
}

// arfusePeerTimeout: each waiting rank names the peer it waited for; the peer most ranks name is
// the stuck one.
void Analyzer::analyseArfuseTimeouts(Result* r) {
  if (waits_.empty()) return;
  std::map<int, std::set<int>> waitersOf;
  for (const auto& [waiter, pg] : waits_) waitersOf[pg.first].insert(waiter);
  int stuck = -1;
  size_t most = 0;
  for (const auto& [peer, ws] : waitersOf)
    if (ws.size() > most) {
      most = ws.size();
      stuck = peer;
    }
  if (stuck < 0) return;
  std::string call;
  int anyGroup = waits_.begin()->second.second;
  for (auto& g : groups_) {
    if (g.detail("code") != "arfusePeerTimeout" && catalog_.sig(g.sig).id != "arfuse.peer_timeout") continue;
    if (call.empty()) call = g.detail("call");
    std::string head = "rank " + std::to_string(stuck) + " is the stuck rank: rank" +
                       (waitersOf[stuck].size() > 1 ? "s " : " ") + rankList(waitersOf[stuck]) + " waited for it";
    if (!call.empty()) head += " at call " + call;
    std::string op = g.detail("op"), bytes = g.detail("bytes");
    if (!op.empty()) head += " (" + op + (bytes.empty() ? "" : ", " + bytes + " B") + ")";
    g.setDetail("headline", head);
    g.setDetail("stuck_rank", std::to_string(stuck));
    if (waits_.count(stuck))
      g.notes.push_back("rank " + std::to_string(stuck) + " itself waited for rank " +
                        std::to_string(waits_.at(stuck).first) + ": follow that chain");
  }
  (void)anyGroup;
  (void)r;
}

// arfuse's NCCL watch across hosts: every survivor stuck in a communicator lists the ranks its
// operation waits with, and NCCL cannot say which of them stopped. A line's own rank is the one
// rank all the lines list but it (robust to lines that show a local rank), else the rank it was
// printed with; the listed ranks that report nothing are the silent ones.
void Analyzer::analyseNcclWatch(Result* r) {
  (void)r;
  if (ncclWaits_.empty()) return;
  std::set<int> listed, reporters;
  for (const auto& [rank, with] : ncclWaits_) listed.insert(with.begin(), with.end());
  for (const auto& [rank, with] : ncclWaits_) {
    std::set<int> others;
    for (int q : listed)
      if (!with.count(q)) others.insert(q);
    if (others.size() == 1)
      reporters.insert(*others.begin());
    else if (rank >= 0)
      reporters.insert(rank);
  }
  // No line says whose it is (no rank in it, none to infer): who is silent cannot be told.
  if (reporters.empty()) return;
  std::set<int> silent;
  for (int q : listed)
    if (!reporters.count(q)) silent.insert(q);
  if (silent.empty()) return;
  const bool one = silent.size() == 1;
  const std::string head = "rank" + std::string(one ? " " : "s ") + rankList(silent) + (one ? " is" : " are") +
                           " silent: rank" + (reporters.size() > 1 ? "s " : " ") + rankList(reporters) +
                           " timed out in NCCL operations across hosts that wait with " + (one ? "it" : "them") +
                           ", and " + (one ? "it reports" : "they report") + " no such timeout";
  for (auto& g : groups_) {
    if (catalog_.sig(g.sig).id != "arfuse.nccl_watch_timeout") continue;
    g.setDetail("headline", head);
    g.setDetail("silent_ranks", rankList(silent));
  }
}

// Flight-recorder dumps: the rank whose progress (last epoch reached) is lowest is the one every
// other rank waits for. Produces a derived event when the dumps single one out.
void Analyzer::analyseFlightRecorder(Result* r) {
  int sig = catalog_.find("arfuse.fr_laggard");
  if (fr_.empty() || sig < 0) return;
  std::map<int, std::set<int>> namedBy;  // error records: peer -> ranks that recorded waiting on it
  for (const auto& [rank, peer] : errorRecords_) namedBy[peer].insert(rank);
  std::map<int, long> reach;
  for (const auto& [rank, f] : fr_) reach[rank] = std::max(f.lastCompleted, f.firstPending);
  long minReach = reach.begin()->second, maxReach = minReach;
  for (const auto& [rank, v] : reach) {
    minReach = std::min(minReach, v);
    maxReach = std::max(maxReach, v);
  }
  std::set<int> low;
  for (const auto& [rank, v] : reach)
    if (v == minReach) low.insert(rank);
  int laggard = -1;
  std::string why;
  if (!namedBy.empty()) {
    size_t most = 0;
    for (const auto& [peer, ws] : namedBy)
      if (ws.size() > most) {
        most = ws.size();
        laggard = peer;
      }
    why = "error records of rank" + std::string(namedBy[laggard].size() > 1 ? "s " : " ") + rankList(namedBy[laggard]) +
          " name it as the peer they waited for";
  } else if (low.size() == 1 && fr_.size() > 1 && minReach < maxReach) {
    laggard = *low.begin();
    why = "its last call reached epoch " + std::to_string(minReach) + " while the others reached " +
          std::to_string(maxReach);
  }
  std::set<int> missing;
  if (r->nranks > 0)
    for (int k = 0; k < r->nranks; ++k)
      if (!fr_.count(k)) missing.insert(k);
  if (laggard < 0 && missing.size() == 1 && fr_.size() > 1) {
    laggard = *missing.begin();
    why = "it is the only rank without a flight-recorder dump (its process may be gone or wedged)";
  }
  std::ostringstream by;
  for (const auto& [rank, f] : fr_) {
    by << (by.tellp() > 0 ? " " : "") << rank << ":" << f.lastCompleted;
    if (f.firstPending >= 0) by << "(pending " << f.firstPending << ")";
  }
  if (laggard < 0) {
    // Nothing singles a rank out: keep it as context so the report shows the per-rank epochs.
    return;
  }
  EventGroup e;
  e.sig = sig;
  e.cls = catalog_.sig(sig).cls;
  auto it = fr_.find(laggard);
  e.first = it != fr_.end() ? it->second.header : fr_.begin()->second.header;
  e.first.rank = laggard;
  e.first.rankInferred = false;
  e.count = 1;
  e.ranks.insert(laggard);
  e.text = "rank " + std::to_string(laggard) + " is the one the others wait for: " + why;
  e.raw = e.text;
  e.setDetail("headline", e.text);
  e.setDetail("stuck_rank", std::to_string(laggard));
  e.setDetail("last_completed_by_rank", by.str());
  if (it != fr_.end() && it->second.firstPending >= 0)
    e.notes.push_back("rank " + std::to_string(laggard) + " has call epoch " + std::to_string(it->second.firstPending) +
                      " (" + it->second.pendingOp + ") still pending");
  if (!missing.empty() && missing.count(laggard) == 0) e.notes.push_back("no dump from rank(s) " + rankList(missing));
  if (it != fr_.end() && !it->second.lastError.empty())
    e.notes.push_back("rank " + std::to_string(laggard) + "'s last error: " + it->second.lastError);
  // If arfuse timeout lines named the same rank, say they agree.
  for (const auto& g : groups_)
    if (g.detail("stuck_rank") == std::to_string(laggard)) {
      e.notes.push_back("agrees with the arfusePeerTimeout lines");
      break;
    }
  groups_.push_back(std::move(e));
}

// Error records that name their own cause (dumps of arfuse 0.1+): a divergent call (code=mismatch:
// the rank most records name as the peer is the odd one) or two streams on one communicator
// (code=concurrent). One derived event per kind.
void Analyzer::analyseErrorRecords(Result* r) {
  (void)r;
  for (const char* code : {"mismatch", "concurrent"}) {
    const int sig = catalog_.find(std::string(code) == "mismatch" ? "arfuse.fr_divergent" : "arfuse.fr_concurrent");
    if (sig < 0) continue;
    const OtherRecord* first = nullptr;
    std::set<int> recorders;
    std::map<int, std::set<int>> namedBy;  // peer -> ranks whose record names it
    for (const OtherRecord& o : otherRecords_) {
      if (o.code != code) continue;
      if (!first || (o.epoch >= 0 && o.epoch < first->epoch)) first = &o;
      recorders.insert(o.rank);
      if (o.peer >= 0) namedBy[o.peer].insert(o.rank);
    }
    if (!first) continue;
    EventGroup e;
    e.sig = sig;
    e.cls = catalog_.sig(sig).cls;
    e.first = first->at;
    e.count = recorders.size();
    e.ranks = recorders;
    const std::string call = first->epoch >= 0 ? std::to_string(first->epoch) : std::string("?");
    const std::string by =
        " (error record" + std::string(recorders.size() > 1 ? "s of ranks " : " of rank ") + rankList(recorders) + ")";
    if (std::string(code) == "mismatch") {
      e.text = "divergent call at call " + call + ": rank " + std::to_string(first->rank) + " made " +
               (first->mine.empty() ? "?" : first->mine) + ", rank " + std::to_string(first->peer) + " made " +
               (first->theirs.empty() ? "?" : first->theirs) + by;
      int odd = -1;
      size_t most = 0;
      bool tie = false;
      for (const auto& [peer, ws] : namedBy) {
        if (ws.size() > most) {
          most = ws.size();
          odd = peer;
          tie = false;
        } else if (ws.size() == most) {
          tie = true;
        }
      }
      if (odd >= 0 && !tie && most > 1) {
        e.setDetail("odd_rank", std::to_string(odd));
        e.notes.push_back("rank " + std::to_string(odd) + " is the odd one: ranks " + rankList(namedBy[odd]) +
                          " found its call different from theirs");
      }
      e.setDetail("mine", first->mine);
      e.setDetail("theirs", first->theirs);
    } else {
      e.text = "two calls of rank " + std::to_string(first->rank) + " ran at the same time (call " + call +
               "): a communicator must be used from one stream at a time" + by;
      if (!first->mine.empty()) e.setDetail("mine", first->mine);
    }
    e.raw = e.text;
    e.setDetail("headline", e.text);
    e.setDetail("call", call);
    groups_.push_back(std::move(e));
  }
}

}  // namespace triage
}  // namespace arfuse
