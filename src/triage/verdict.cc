// Analyzer::finish(): the cross-rank analyses (who is the laggard, who is everyone waiting for) and
// the verdict (which origin is the root cause, which echoes it explains, what to capture next).
#include <algorithm>
#include <cmath>
#include <iterator>
#include <sstream>

#include "analyzer.h"
#include "text.h"

namespace arfuse {
namespace triage {

namespace {

// "0-4,6,7" (at most 40 runs are written; a hostile log can name 65536 scattered ranks)
std::string rankList(const std::set<int>& ranks) {
  std::string out;
  auto it = ranks.begin();
  int runs = 0;
  while (it != ranks.end()) {
    if (++runs > 40) {
      out += ",... (" + std::to_string(std::distance(it, ranks.end())) + " more)";
      break;
    }
    int a = *it, b = a;
    auto jt = std::next(it);
    while (jt != ranks.end() && *jt == b + 1) {
      b = *jt;
      ++jt;
    }
    if (!out.empty()) out += ",";
    out += std::to_string(a);
    if (b > a) out += (b == a + 1 ? "," : "-") + std::to_string(b);
    it = jt;
  }
  return out;
}

// The value most ranks share, and the ranks that differ from it.
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

std::string Analyzer::ranksText(const EventGroup& g, int nranks) const {
  if (g.ranks.empty()) {
    std::string p;
    for (const auto& s : g.procs) {
      if (!p.empty()) p += ", ";
      p += s == "main" ? "main process" : s;
    }
    return "no rank (" + p + ")";
  }
  size_t n = g.rankCount();
  if (g.moreRanks) return std::to_string(n) + " ranks (the first " + std::to_string(g.ranks.size()) + " kept)";
  if (n == 1 && nranks == 1) return "rank " + std::to_string(*g.ranks.begin()) + " (the only rank seen)";
  if (nranks > 0 && n == static_cast<size_t>(nranks))
    return std::to_string(n) + "/" + std::to_string(nranks) + " ranks";
  std::string frac = nranks > 0 ? " (" + std::to_string(n) + "/" + std::to_string(nranks) + ")" : "";
  if (n == 1) return "rank " + std::to_string(*g.ranks.begin()) + " only" + frac;
  return "ranks " + rankList(g.ranks) + frac;
}

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

// The root cause among the origins (sorted best first), the surface it explains, the others.
void Analyzer::chooseRoot(Result* r, const std::vector<int>& origins) {
  r->status = Result::kRootCause;
  r->rootGroup = origins[0];
  // A surface message (NCCL's "invalid usage", "unhandled system error") gives way to the origin
  // that says why, on the same rank or process: NCCL's WARN, the line after "Last error:".
  const Signature& top = catalog_.sig(groups_[r->rootGroup].sig);
  if (!top.explainedBy.empty()) {
    const EventGroup& surface = groups_[r->rootGroup];
    auto sameSide = [&](const EventGroup& a, const EventGroup& b) {
      if (a.ranks.empty() || b.ranks.empty()) return true;
      for (int x : a.ranks)
        if (b.ranks.count(x)) return true;
      return false;
    };
    for (int o : origins) {
      const Signature& os = catalog_.sig(groups_[o].sig);
      if (o == r->rootGroup || !os.explainedBy.empty() || !sameSide(surface, groups_[o])) continue;
      bool match = false;
      for (const auto& prefix : top.explainedBy) match = match || os.id.compare(0, prefix.size(), prefix) == 0;
      if (!match) continue;
      r->explainedSurface = r->rootGroup;
      r->rootGroup = o;  // origins are sorted best first: the first match is the best explanation
      groups_[o].notes.push_back("explains " + top.id + " (\"" + clip(surface.text, 120) +
                                 "\"), the message the "
                                 "framework surfaced");
      break;
    }
  }
  EventGroup& root = groups_[r->rootGroup];
  // arfuse's own watchdog (its lines' site is watchdog.cc) reads the kernels' error records: its
  // line is the faulting call's, so the remark below is about PyTorch's only.
  std::string raw = root.raw;
  const std::string site = root.detail("site");
  if (!site.empty() && raw.find(site) != std::string::npos) raw.erase(raw.find(site), site.size());
  if (raw.find("atchdog") != std::string::npos && root.sig != catalog_.find("c10d.watchdog_timeout"))
    root.notes.push_back(
        "reported by the PyTorch NCCL watchdog thread, which only polls for completed work: the reporting site is "
        "not the faulting kernel");
  int w = catalog_.sig(root.sig).weight;
  if (r->explainedSurface >= 0) w = std::max(w, catalog_.sig(groups_[r->explainedSurface].sig).weight);
  r->confidence = w >= 70 ? "high" : w >= 45 ? "medium" : "low";
  std::set<int> seen = {groups_[r->rootGroup].sig};
  for (size_t i = 0; i < origins.size() && r->otherOrigins.size() < 8; ++i)
    if (origins[i] != r->rootGroup && seen.insert(groups_[origins[i]].sig).second)
      r->otherOrigins.push_back(origins[i]);
}

// How far the ordering (and the inputs) can be trusted, said once at the end of the report.
void Analyzer::noteOrdering(Result* r) {
  // Say how far the ordering can be trusted.
  uint64_t exact = stampedEvents_, approx = unstampedEvents_, up = uptimeEvents_;
  if (exact + approx + up > 0) {
    std::ostringstream o;
    o << exact << " of " << (exact + approx + up) << " matched lines carry a wall-clock stamp";
    if (approx)
      o << "; " << approx << " (NCCL, arfuse, tracebacks, faulthandler) do not and are placed by file position"
        << " (shown with the last stamp above them, marked ~)";
    r->orderingNotes.push_back(o.str());
  }
  if (up)
    r->orderingNotes.push_back(std::to_string(up) +
                               " kernel (dmesg) lines carry seconds since boot, which cannot be merged with wall-clock "
                               "stamps; use `dmesg -T` or journalctl for comparable times");
  if (defaultYear_ == 0 && exact > 0)
    r->orderingNotes.push_back("no stamp names a year (vLLM, glog and syslog omit it): times are shown as month-day");
  if (inputs_.size() > 1)
    r->orderingNotes.push_back("events from " + std::to_string(inputs_.size()) +
                               " files are merged by stamp; stamps from different hosts assume synchronised clocks");
  if (droppedGroups_)
    r->orderingNotes.push_back(std::to_string(droppedGroups_) + " distinct events beyond the first " +
                               std::to_string(groups_.size()) + " were not kept");
  if (droppedRecords_)
    r->orderingNotes.push_back(std::to_string(droppedRecords_) +
                               " flight-recorder records / torchrun failures beyond "
                               "the first 65536 were counted, not kept");
  if (ranksOutOfRange_)
    r->orderingNotes.push_back(std::to_string(ranksOutOfRange_) + " lines named a rank above " +
                               std::to_string(kMaxRank) + "; those rank numbers were ignored");
  if (nranksClaimIgnored_)
    r->orderingNotes.push_back(std::to_string(nranksClaimIgnored_) + " claims of more than " +
                               std::to_string(kMaxRank + 1) + " ranks were ignored");
  uint64_t windowed = 0;
  for (const auto& in : inputs_) windowed += in.windowedLines;
  if (windowed)
    r->orderingNotes.push_back(std::to_string(windowed) +
                               " lines longer than 64 KiB were scanned in overlapping "
                               "64 KiB windows (nothing was cut; evidence text is shortened)");
}

Result Analyzer::finish() {
  Result r;
  // Ranks: the launcher's declared size, or the highest rank seen -- or named: a rank that every
  // arfusePeerTimeout line waits for may never print a line itself (it is the stuck one).
  int highest = maxRank_;
  for (const auto& [waiter, pg] : waits_) highest = std::max(highest, pg.first);
  for (const auto& [rank, with] : ncclWaits_)
    if (!with.empty()) highest = std::max(highest, *with.rbegin());
  r.nranks = std::max(nranksHint_, highest + 1);
  r.nranksSource = nranksHint_ >= highest + 1 && nranksHint_ > 0
                       ? nranksHintSource_
                       : (highest > maxRank_ ? "highest rank seen or waited for" : "highest rank seen");
  if (r.nranks <= 0) r.nranks = 0;

  analyseWatchdog(&r);
  analyseArfuseTimeouts(&r);
  analyseNcclWatch(&r);
  analyseFlightRecorder(&r);
  analyseErrorRecords(&r);

  const int year = defaultYear_ ? defaultYear_ : 1970;
  for (auto& g : groups_) {
    if (g.first.stamp.valid()) g.first.t = stampSeconds(g.first.stamp, year);
  }
  auto earlier = [&](int a, int b) {
    const Occurrence &x = groups_[a].first, &y = groups_[b].first;
    if (x.t >= 0 && y.t >= 0 && x.t != y.t) return x.t < y.t;
    if (x.file != y.file) return x.file < y.file;
    return x.line < y.line;
  };

  std::vector<int> origins;
  for (size_t i = 0; i < groups_.size(); ++i) {
    const EventGroup& g = groups_[i];
    if (g.cls == SigClass::kOrigin)
      origins.push_back(static_cast<int>(i));
    else if (g.cls == SigClass::kEcho)
      r.echoes.push_back(static_cast<int>(i));
    else
      r.contexts.push_back(static_cast<int>(i));
  }
  std::stable_sort(origins.begin(), origins.end(), [&](int a, int b) {
    int wa = catalog_.sig(groups_[a].sig).weight, wb = catalog_.sig(groups_[b].sig).weight;
    if (wa != wb) return wa > wb;
    return earlier(a, b);
  });
  std::stable_sort(r.echoes.begin(), r.echoes.end(), [&](int a, int b) { return groups_[a].count > groups_[b].count; });
  std::stable_sort(r.contexts.begin(), r.contexts.end(), earlier);

  if (!origins.empty()) {
    chooseRoot(&r, origins);
  } else {
    r.status = r.echoes.empty() ? Result::kNoEvidence : Result::kEchoesOnly;
    int s = catalog_.find(r.status == Result::kNoEvidence ? "triage.no_evidence" : "triage.echoes_only");
    for (const auto& f : torchrun_)
      if (f.first)
        r.capture.push_back("the full output of rank " + std::to_string(f.rank) +
                            " (torchelastic's first observed failure, exitcode " + f.exitcode +
                            "): its own stderr holds the cause");
    if (s >= 0) {
      // The catalogue's `next` lists captures separated by ';'.
      std::string next = catalog_.sig(s).next;
      size_t p = 0;
      while (p < next.size()) {
        size_t q = next.find(';', p);
        if (q == std::string::npos) q = next.size();
        std::string item = next.substr(p, q - p);
        while (!item.empty() && item.front() == ' ') item.erase(0, 1);
        while (!item.empty() && item.back() == ' ') item.pop_back();
        if (!item.empty()) r.capture.push_back(item);
        p = q + 1;
      }
    }
  }

  // Time line: origins and echoes by first occurrence.
  for (size_t i = 0; i < groups_.size(); ++i)
    if (groups_[i].cls != SigClass::kContext) r.timeline.push_back(static_cast<int>(i));
  std::stable_sort(r.timeline.begin(), r.timeline.end(), [&](int a, int b) {
    const Occurrence &x = groups_[a].first, &y = groups_[b].first;
    bool xt = x.t >= 0, yt = y.t >= 0;
    if (xt != yt) return xt;  // stamped first, then the rest in file order
    return earlier(a, b);
  });

  noteOrdering(&r);
  composeVerdict(&r);
  return r;
}

// The verdict line: the cause, where it was seen and which ranks, in one line a person (or a grep of
// many reports) can act on without reading further.
void Analyzer::composeVerdict(Result* r) {
  auto fileName = [&](int file) -> std::string {
    if (file < 0 || file >= static_cast<int>(inputs_.size())) return "(derived across ranks)";
    return inputs_[file].path == "-" ? "<stdin>" : printable(inputs_[file].path);  // one line, whatever the name
  };
  std::string v = "VERDICT: ";
  if (r->status == Result::kRootCause) {
    const EventGroup& g = groups_[r->rootGroup];
    const Signature& s = catalog_.sig(g.sig);
    EventGroup all;  // ranks over every group of the signature
    for (const auto& o : groups_)
      if (o.sig == g.sig) {
        for (int k : o.ranks) all.addRank(k);
        all.moreRanks += o.moreRanks;
        all.procs.insert(o.procs.begin(), o.procs.end());
      }
    v += s.title + ": \"" + clip(g.text, 220) + "\"";
    if (g.first.file >= 0) v += " at " + fileName(g.first.file) + ":" + std::to_string(g.first.line);
    v += ", " + ranksText(all, r->nranks);
    const std::string raised = g.detail("raised_at");
    const size_t in = raised.rfind(", in ");
    if (in != std::string::npos) {
      std::string where = raised;
      const size_t q1 = where.find('"'), q2 = q1 == std::string::npos ? q1 : where.find('"', q1 + 1);
      std::string file = q2 == std::string::npos ? "" : where.substr(q1 + 1, q2 - q1 - 1);
      const size_t slash = file.rfind('/');
      if (slash != std::string::npos) {
        const size_t slash2 = file.rfind('/', slash - 1);
        file = file.substr(slash2 == std::string::npos ? 0 : slash2 + 1);
      }
      v += ", in " + raised.substr(in + 5) + "()" + (file.empty() ? "" : " of " + file);
    }
    const std::string head = g.detail("headline");
    if (!head.empty() && g.text.find(head) == std::string::npos) v += " - " + head;
    if (r->explainedSurface >= 0) v += " (explains: \"" + clip(groups_[r->explainedSurface].text, 100) + "\")";
  } else if (r->status == Result::kEchoesOnly) {
    uint64_t n = 0;
    for (int e : r->echoes) n += groups_[e].count;
    const EventGroup& top = groups_[r->echoes.front()];
    v += "no root cause found: only echoes of a failure (" + std::to_string(n) + (n == 1 ? " line" : " lines") +
         ", e.g. \"" + clip(top.text, 140) + "\"); the line that caused it is not in these inputs";
    for (const auto& f : torchrun_)
      if (f.first) {
        v += "; torchelastic: rank " + std::to_string(f.rank) + " failed first (exitcode " + f.exitcode + ")";
        break;
      }
  } else {
    uint64_t lines = totalLines(), bytes = totalBytes();
    if (inputs_.empty())
      v += "no root cause found: no readable input (" + std::to_string(skippedInputs_) + " skipped)";
    else if (bytes == 0)
      v += std::string("no root cause found: the input") + (inputs_.size() == 1 ? " is" : "s are") +
           " empty (0 bytes): nothing to analyse";
    else
      v += "no root cause found: no error line in " + std::to_string(lines) + " lines of " +
           std::to_string(inputs_.size()) + (inputs_.size() == 1 ? " input" : " inputs") +
           " (a silent hang leaves none)";
  }
  r->verdict = v;
}

}  // namespace triage
}  // namespace arfuse
