// Analyzer::finish(): runs the cross-rank analyses (crossrank.cc), then the verdict: which origin is the
// root cause, which echoes it explains, what to capture next - or, when the best evidence is a symptom
// (a segfault, a hang, a cut traceback), that the evidence is insufficient and what would settle it.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <sstream>

#include "analyzer.h"
#include "analyzer_state.h"
#include "text.h"

namespace arfuse {
namespace triage {

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

// The root cause among the origins (sorted best first), the surface it explains, the others. A symptom
// (a signature that says what happened, not why) is never the root cause while any cause is seen; a
// symptom that a cross-rank analysis turned into a finding (the c10d laggard) counts as one.
void Analyzer::chooseRoot(Result* r, const std::vector<int>& origins) {
  auto isCause = [&](int g) { return !catalog_.sig(groups_[g].sig).symptom || !groups_[g].detail("headline").empty(); };
  std::vector<int> causes;
  for (int o : origins)
    if (isCause(o)) causes.push_back(o);
  r->status = causes.empty() ? Result::kInsufficient : Result::kRootCause;
  r->rootGroup = causes.empty() ? origins[0] : causes[0];
  // A surface message (NCCL's "invalid usage", "unhandled system error") gives way to the origin
  // that says why, on the same rank or process: NCCL's WARN, the line after "Last error:".
  const Signature& top = catalog_.sig(groups_[r->rootGroup].sig);
  if (!top.explainedBy.empty() && r->status == Result::kRootCause) {
    const EventGroup& surface = groups_[r->rootGroup];
    auto sameSide = [&](const EventGroup& a, const EventGroup& b) {
      if (a.ranks.empty() || b.ranks.empty()) return true;
      for (int x : a.ranks)
        if (b.ranks.count(x)) return true;
      return false;
    };
    for (int o : causes) {
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
  if (r->status == Result::kInsufficient) r->confidence = "insufficient";
  std::set<int> seen = {groups_[r->rootGroup].sig};
  for (size_t i = 0; i < origins.size() && r->otherOrigins.size() < 8; ++i)
    if (origins[i] != r->rootGroup && seen.insert(groups_[origins[i]].sig).second)
      r->otherOrigins.push_back(origins[i]);
}

// The capture list of a symptom with no cause: what the symptom's own entry asks for, then the general
// list for a crash or hang with no message (triage.insufficient).
void Analyzer::insufficientCapture(Result* r) {
  torchrunCapture(r);
  const EventGroup& g = groups_[r->rootGroup];
  const std::string crashed = g.detail("crashed_at").empty() ? g.detail("raised_at") : g.detail("crashed_at");
  if (!crashed.empty())
    r->capture.push_back("the frame it read (" + clip(crashed, 160) +
                         ") is where the crash happened, not why: a core dump (ulimit -c unlimited) and "
                         "`gdb python core -ex 'thread apply all bt'` name the native function");
  appendCaptures(r, catalog_.sig(g.sig).next);
  const int s = catalog_.find("triage.insufficient");
  if (s >= 0) appendCaptures(r, catalog_.sig(s).next);
}

void Analyzer::torchrunCapture(Result* r) {
  for (const auto& f : torchrun_)
    if (f.first)
      r->capture.push_back("the full output of rank " + std::to_string(f.rank) +
                           " (torchelastic's first observed failure, exitcode " + f.exitcode +
                           "): its own stderr holds the cause");
}

// A catalogue `next` lists captures separated by ';'; each is kept once.
void Analyzer::appendCaptures(Result* r, const std::string& next) {
  size_t p = 0;
  while (p < next.size()) {
    size_t q = next.find(';', p);
    if (q == std::string::npos) q = next.size();
    std::string item = next.substr(p, q - p);
    while (!item.empty() && item.front() == ' ') item.erase(0, 1);
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty() && std::find(r->capture.begin(), r->capture.end(), item) == r->capture.end())
      r->capture.push_back(item);
    p = q + 1;
  }
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
  explainGroups();
  r.envNotes = environmentNotes(env_);

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
  // Specific signatures rank by weight. Generic reports (an exception no entry knows, an NCCL WARN, an
  // error line of the grep floor) say only that something failed: among them the first one wins - the
  // origin comes before the cascade that reports it - in two tiers (warnings and echo-like lines last).
  auto rankWeight = [&](int g) {
    const Signature& s = catalog_.sig(groups_[g].sig);
    return s.generic ? (s.weight >= 20 ? 34 : 12) : s.weight;
  };
  std::stable_sort(origins.begin(), origins.end(), [&](int a, int b) {
    const int wa = rankWeight(a), wb = rankWeight(b);
    if (wa != wb) return wa > wb;
    return earlier(a, b);
  });
  std::stable_sort(r.echoes.begin(), r.echoes.end(), [&](int a, int b) { return groups_[a].count > groups_[b].count; });
  std::stable_sort(r.contexts.begin(), r.contexts.end(), earlier);

  if (!origins.empty()) {
    chooseRoot(&r, origins);
    tieConsequences(&r);
    if (r.status == Result::kInsufficient) insufficientCapture(&r);
  } else {
    r.status = r.echoes.empty() ? Result::kNoEvidence : Result::kEchoesOnly;
    int s = catalog_.find(r.status == Result::kNoEvidence ? "triage.no_evidence" : "triage.echoes_only");
    torchrunCapture(&r);
    if (s >= 0) appendCaptures(&r, catalog_.sig(s).next);
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

namespace {

// "begin_forward() of flashinfer/decode.py" from 'File "/x/flashinfer/decode.py", line 514 in begin_forward'
// (faulthandler) or '..., line 12, in f' (a traceback); empty when the frame names no function.
std::string frameWhere(const std::string& frame) {
  size_t in = frame.rfind(", in ");
  size_t skip = 5;
  if (in == std::string::npos) {
    in = frame.rfind(" in ");
    skip = 4;
    if (in == std::string::npos || frame.find("\", line ") == std::string::npos) return "";
  }
  const size_t q1 = frame.find('"'), q2 = q1 == std::string::npos ? q1 : frame.find('"', q1 + 1);
  std::string file = q2 == std::string::npos ? "" : frame.substr(q1 + 1, q2 - q1 - 1);
  const size_t slash = file.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const size_t slash2 = file.rfind('/', slash - 1);
    file = file.substr(slash2 == std::string::npos ? 0 : slash2 + 1);
  }
  return frame.substr(in + skip) + "()" + (file.empty() ? "" : " of " + file);
}

}  // namespace

// The verdict line: the cause, where it was seen and which ranks, in one line a person (or a grep of
// many reports) can act on without reading further.
void Analyzer::composeVerdict(Result* r) {
  auto fileName = [&](int file) -> std::string {
    if (file < 0 || file >= static_cast<int>(inputs_.size())) return "(derived across ranks)";
    return inputs_[file].path == "-" ? "<stdin>" : printable(inputs_[file].path);  // one line, whatever the name
  };
  std::string v = "VERDICT: ";
  if (r->status == Result::kRootCause || r->status == Result::kInsufficient) {
    const EventGroup& g = groups_[r->rootGroup];
    const Signature& s = catalog_.sig(g.sig);
    EventGroup all;  // ranks over every group of the signature
    for (const auto& o : groups_)
      if (o.sig == g.sig) {
        for (int k : o.ranks) all.addRank(k);
        all.moreRanks += o.moreRanks;
        all.procs.insert(o.procs.begin(), o.procs.end());
      }
    if (r->status == Result::kInsufficient) v += "insufficient evidence: ";
    v += s.title;
    if (g.knowledge >= 0) v += ": " + catalog_.sig(g.knowledge).title;  // the error the line names
    v += ": \"" + clip(g.text, 220) + "\"";
    if (g.first.file >= 0) v += " at " + fileName(g.first.file) + ":" + std::to_string(g.first.line);
    v += ", " + ranksText(all, r->nranks);
    const std::string where =
        frameWhere(g.detail("raised_at").empty() ? g.detail("crashed_at") : g.detail("raised_at"));
    if (!where.empty()) v += ", in " + where;
    if (where.empty() && !g.detail("crashed_in").empty()) v += ", crashed in " + g.detail("crashed_in");
    const std::string head = g.detail("headline");
    if (!head.empty() && g.text.find(head) == std::string::npos) v += " - " + head;
    if (r->explainedSurface >= 0) v += " (explains: \"" + clip(groups_[r->explainedSurface].text, 100) + "\")";
    if (r->status == Result::kInsufficient)
      v += " - no line in these logs says why; capture next: " +
           (r->capture.empty() ? std::string("see below") : clip(r->capture.front(), 160));
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
