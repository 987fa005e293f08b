#include "report.h"

#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <sstream>

#include "text.h"

namespace arfuse {
namespace triage {

namespace {

std::string formatTime(const Occurrence& o, int defaultYear) {
  if (!o.stamp.valid()) {
    if (o.uptime >= 0) {
      char b[48];
      std::snprintf(b, sizeof(b), "[%.3f s since boot]", o.uptime);
      return b;
    }
    return "";
  }
  const Stamp& s = o.stamp;
  int h = static_cast<int>(s.sod / 3600), m = static_cast<int>(s.sod / 60) % 60;
  double sec = s.sod - h * 3600 - m * 60;
  char b[64];
  int year = s.year ? s.year : defaultYear;
  if (year)
    std::snprintf(b, sizeof(b), "%s%04d-%02d-%02d %02d:%02d:%06.3f", o.stampApprox ? "~" : "", year, s.month, s.day, h,
                  m, sec);
  else
    std::snprintf(b, sizeof(b), "%s%02d-%02d %02d:%02d:%06.3f", o.stampApprox ? "~" : "", s.month, s.day, h, m, sec);
  return b;
}

Occurrence exactStamp(const Occurrence& o) {
  Occurrence c = o;
  c.stampApprox = false;
  return c;
}

std::string fileName(const Analyzer& a, int file) {
  if (file < 0 || file >= static_cast<int>(a.inputs().size())) return "(derived)";
  const std::string& p = a.inputs()[file].path;
  return p == "-" ? "<stdin>" : printable(p);  // a file or tar member name is any string: one line
}

std::string where(const Analyzer& a, const Occurrence& o) { return fileName(a, o.file) + ":" + std::to_string(o.line); }

std::string rankOf(const Occurrence& o) {
  if (o.rank >= 0) return "rank " + std::to_string(o.rank) + (o.rankInferred ? "?" : "");
  if (o.proc == "main") return "main process";
  return o.proc.empty() ? "no rank" : o.proc;
}

// The ranks affected by a root cause: every group of the same signature counts.
EventGroup mergedBySig(const Analyzer& a, int group) {
  const auto& gs = a.groups();
  EventGroup m = gs[group];
  m.count = 0;
  m.ranks.clear();
  m.procs.clear();
  for (const auto& g : gs) {
    if (g.sig != m.sig) continue;
    m.count += g.count;
    for (int r : g.ranks) m.addRank(r);
    m.moreRanks += g.moreRanks;
    m.procs.insert(g.procs.begin(), g.procs.end());
  }
  return m;
}

uint64_t echoCount(const Analyzer& a, const Result& r) {
  uint64_t n = 0;
  for (int e : r.echoes) n += a.groups()[e].count;
  return n;
}

std::string signalName(const std::string& exitcode) {
  if (exitcode.empty() || exitcode[0] != '-') return "";
  int sig = std::atoi(exitcode.c_str() + 1);
  switch (sig) {
    case 6:
      return "SIGABRT";
    case 7:
      return "SIGBUS";
    case 9:
      return "SIGKILL (often the host oom-killer)";
    case 11:
      return "SIGSEGV";
    case 15:
      return "SIGTERM (sent by the launcher after another rank failed)";
    default:
      return "signal " + std::to_string(sig);
  }
}

// Prose wrapped at ~110 columns, continuation lines indented by `indent` spaces.
std::string wrap(const std::string& text, size_t indent, size_t width = 110) {
  std::string out, word;
  size_t col = indent;
  std::istringstream in(text);
  bool first = true;
  while (in >> word) {
    if (!first && col + 1 + word.size() > width) {
      out += "\n" + std::string(indent, ' ');
      col = indent;
    } else if (!first) {
      out += ' ';
      ++col;
    }
    out += word;
    col += word.size();
    first = false;
  }
  return out;
}

void textEvent(const Analyzer& a, int gi, std::ostream& out) {
  const EventGroup& g = a.groups()[gi];
  const Signature& s = a.catalog().sig(g.sig);
  std::string text = g.text.size() > 150 ? g.text.substr(0, 147) + "..." : g.text;
  out << "    " << g.count << "x  [" << s.id << "] " << text << "\n"
      << "         " << a.ranksText(g, 0) << ", first at " << where(a, g.first);
  std::string t = formatTime(g.first, a.defaultYear());
  if (!t.empty()) out << " " << t;
  out << "\n";
}

// "cuda 217 cudaErrorPeerAccessUnsupported" for an error-table entry.
std::string errorKey(const Signature& k) {
  std::string s = k.errKind;
  if (k.errCode >= 0) s += " " + std::to_string(k.errCode);
  for (const auto& n : k.errNames) s += " " + n;
  return s;
}

// ---- JSON ----
std::string jstr(const std::string& s) { return jsonString(s); }

void jsonOcc(const Analyzer& a, const Occurrence& o, std::ostream& out) {
  out << "{\"file\":" << jstr(fileName(a, o.file)) << ",\"line\":" << o.line << ",\"rank\":";
  if (o.rank >= 0)
    out << o.rank;
  else
    out << "null";
  out << ",\"rank_inferred\":" << (o.rankInferred ? "true" : "false") << ",\"process\":" << jstr(o.proc)
      << ",\"time\":" << (o.stamp.valid() ? jstr(formatTime(exactStamp(o), a.defaultYear())) : "null")
      << ",\"time_approx\":" << (o.stampApprox ? "true" : "false") << ",\"uptime_s\":";
  if (o.uptime >= 0)
    out << o.uptime;
  else
    out << "null";
  out << "}";
}

// A JSON array of `items`, each written by put(item, out).
template <class Items, class Put>
void jsonArray(const Items& items, std::ostream& out, Put put) {
  out << "[";
  bool first = true;
  for (const auto& item : items) {
    if (!first) out << ",";
    put(item, out);
    first = false;
  }
  out << "]";
}

template <class Strings>
void jsonStrings(const Strings& items, std::ostream& out) {
  jsonArray(items, out, [](const std::string& v, std::ostream& o) { o << jstr(v); });
}

void jsonEvent(const Analyzer& a, const EventGroup& g, int nranks, bool full, std::ostream& out) {
  const Signature& s = a.catalog().sig(g.sig);
  out << "{\"id\":" << jstr(s.id) << ",\"class\":" << jstr(sigClassName(g.cls)) << ",\"weight\":" << s.weight
      << ",\"title\":" << jstr(s.title) << ",\"meaning\":" << jstr(s.meaning) << ",\"text\":" << jstr(g.text)
      << ",\"count\":" << g.count << ",\"ranks\":";
  jsonArray(g.ranks, out, [](int r, std::ostream& o) { o << r; });
  out << ",\"processes\":";
  jsonStrings(g.procs, out);
  out << ",\"ranks_text\":" << jstr(a.ranksText(g, nranks)) << ",\"first\":";
  jsonOcc(a, g.first, out);
  out << ",\"details\":{";
  bool first = true;
  for (const auto& [k, v] : g.details) {
    out << (first ? "" : ",") << jstr(k) << ":" << jstr(v);
    first = false;
  }
  out << "},\"notes\":";
  jsonStrings(g.notes, out);
  out << ",\"nccl_chain\":";
  jsonStrings(g.chain, out);
  if (full) {
    out << ",\"remedy\":" << jstr(s.remedy) << ",\"next_capture\":" << jstr(s.next) << ",\"source\":" << jstr(s.source)
        << ",\"knowledge\":";
    if (g.knowledge >= 0) {
      const Signature& k = a.catalog().sig(g.knowledge);
      out << "{\"id\":" << jstr(k.id) << ",\"error\":" << jstr(errorKey(k)) << ",\"title\":" << jstr(k.title)
          << ",\"meaning\":" << jstr(k.meaning) << ",\"remedy\":" << jstr(k.remedy)
          << ",\"next_capture\":" << jstr(k.next) << "}";
    } else {
      out << "null";
    }
    out << ",\"context\":";
    jsonArray(g.context, out, [](const auto& c, std::ostream& o) {
      o << "{\"line\":" << c.first << ",\"text\":" << jstr(c.second) << "}";
    });
  }
  out << "}";
}

}  // namespace

int exitCodeOf(const Result& r) { return r.status == Result::kRootCause ? 0 : 1; }

namespace {

// The ROOT CAUSE / INSUFFICIENT EVIDENCE block: the signature's story, then the error table's story of
// the error the line quotes (which decides the remedy), the facts, the echoes.
void textCause(const Analyzer& a, const Result& r, const ReportOptions& o, std::ostream& out) {
  const auto& gs = a.groups();
  const EventGroup& g = gs[r.rootGroup];
  const Signature& s = a.catalog().sig(g.sig);
  const Signature* k = g.knowledge >= 0 ? &a.catalog().sig(g.knowledge) : nullptr;
  EventGroup all = mergedBySig(a, r.rootGroup);
  const bool insufficient = r.status == Result::kInsufficient;
  std::string head = g.detail("headline");
  out << (insufficient ? "INSUFFICIENT EVIDENCE: " : "ROOT CAUSE: ") << wrap(s.meaning, 12) << "\n";
  if (k) out << "  the error: " << wrap(k->title + " (" + errorKey(*k) + "): " + k->meaning, 13) << "\n";
  out << "  signature: " << s.id << " (" << (insufficient ? "symptom" : "origin") << ", confidence " << r.confidence
      << ")" << (k ? ", explained by " + k->id : std::string()) << "\n";
  if (!head.empty()) out << "  finding:   " << head << "\n";
  out << "  evidence:  " << where(a, g.first) << "  " << rankOf(g.first);
  std::string t = formatTime(g.first, a.defaultYear());
  if (!t.empty()) out << "  " << t;
  out << "\n             " << g.text << "\n";
  out << "  ranks:     " << a.ranksText(all, r.nranks) << ", " << all.count
      << (all.count == 1 ? " occurrence" : " occurrences") << "\n";
  for (const auto& [key, v] : g.details) {
    if (key == "headline" || key == "message" || key == "next") continue;
    if (key == "user_frame")
      out << "  the line to change (the caller's frame): " << v << "\n";
    else
      out << "  " << key << ": " << v << "\n";
  }
  if (!g.chain.empty()) {
    out << "  NCCL return chain (first WARN, then the frames it propagated through):\n";
    for (const auto& c : g.chain) out << "             " << c << "\n";
  }
  for (const auto& n : g.notes) out << "  note:      " << wrap(n, 13) << "\n";
  for (const auto& n : r.envNotes) out << "  note:      " << wrap(n, 13) << "\n";
  uint64_t ne = echoCount(a, r);
  out << "  explains:  " << ne << (ne == 1 ? " echo line" : " echo lines") << " in " << r.echoes.size()
      << (r.echoes.size() == 1 ? " group" : " groups") << (r.echoes.empty() ? "" : ":") << "\n";
  for (size_t i = 0; i < r.echoes.size() && static_cast<int>(i) < o.maxEchoes; ++i) textEvent(a, r.echoes[i], out);
  if (static_cast<int>(r.echoes.size()) > o.maxEchoes)
    out << "    ... " << r.echoes.size() - o.maxEchoes << " more echo groups (see --json)\n";
  if (insufficient) {
    out << "  capture next (no line says why it crashed or stopped):\n";
    for (const auto& c : r.capture) out << "    - " << wrap(c, 6) << "\n";
  } else {
    out << "  remedy:    " << wrap(k ? k->remedy + " " + s.remedy : s.remedy, 13) << "\n";
    std::string libNext = g.detail("next");
    if (!libNext.empty()) out << "  next (from the log line): " << libNext << "\n";
    out << "  capture next: " << wrap(k ? k->next + "; " + s.next : s.next, 16) << "\n";
  }
  out << "  source:    " << s.source << (k ? "; " + k->source : std::string()) << "\n";
  for (const auto& f : a.torchrunFailures())
    if (f.first && all.ranks.count(f.rank) == 0 && !all.ranks.empty())
      out << "  note:      torchelastic reports rank " << f.rank << " as the first failure (exitcode " << f.exitcode
          << "), not a rank of this root cause: check that rank's own output too\n";
}

}  // namespace

namespace {
void writeTextRaw(const Analyzer& a, const Result& r, const ReportOptions& o, std::ostream& out);
}

// Log text is untrusted: the whole report passes through printable() (escape sequences, NUL and
// invalid UTF-8 become visible \xNN) on its way to the terminal.
void writeText(const Analyzer& a, const Result& r, const ReportOptions& o, std::ostream& out) {
  std::ostringstream raw;
  writeTextRaw(a, r, o, raw);
  out << printable(raw.str(), true);
}

namespace {
void writeTextRaw(const Analyzer& a, const Result& r, const ReportOptions& o, std::ostream& out) {
  const auto& gs = a.groups();
  double mb = static_cast<double>(a.totalBytes()) / 1e6;
  char mbs[32];
  std::snprintf(mbs, sizeof(mbs), "%.1f MB", mb);
  out << "arfuse triage: " << a.inputs().size() << (a.inputs().size() == 1 ? " file, " : " files, ") << a.totalLines()
      << " lines (" << mbs << ")";
  if (r.nranks > 0) out << ", " << r.nranks << " ranks (" << r.nranksSource << ")";
  out << "\n";
  for (const auto& in : a.inputs())
    if (!in.error.empty())
      out << "  warning: " << printable(in.path) << ": read stopped early: " << printable(in.error) << "\n";
  for (const auto& w : a.inputWarnings()) out << "  warning: " << printable(w) << "\n";
  out << r.verdict << "\n\n";

  if (r.status == Result::kRootCause || r.status == Result::kInsufficient) {
    textCause(a, r, o, out);
  } else {
    if (r.status == Result::kEchoesOnly) {
      out << "NO ROOT CAUSE FOUND: the logs hold only echoes of a failure (" << echoCount(a, r)
          << " lines); the line that caused it is not in these inputs.\n";
      out << "  echoes:\n";
      for (size_t i = 0; i < r.echoes.size() && static_cast<int>(i) < o.maxEchoes; ++i) textEvent(a, r.echoes[i], out);
    } else {
      std::ostringstream m;
      m << "no error line in " << a.totalLines() << " lines from " << a.inputs().size()
        << (a.inputs().size() == 1 ? " file" : " files")
        << ". A silent hang (a custom all-reduce kernel spinning, a rank stuck before a collective) leaves no "
           "line; this is not a clean bill of health.";
      out << "NO ROOT CAUSE FOUND: " << wrap(m.str(), 2) << "\n";
    }
    for (const auto& f : a.torchrunFailures()) {
      out << "  torchelastic: " << (f.first ? "first failure" : "failure") << " rank " << f.rank << ", exitcode "
          << f.exitcode;
      std::string sn = signalName(f.exitcode);
      if (!sn.empty()) out << " (" << sn << ")";
      if (!f.traceback.empty() && f.traceback != "<N/A>") out << ": " << f.traceback;
      out << "\n";
    }
    out << "  capture next:\n";
    for (const auto& c : r.capture) out << "    - " << wrap(c, 6) << "\n";
  }

  if (!r.otherOrigins.empty()) {
    out << "\nALSO SEEN (other origin signatures, lower weight or later; often consequences):\n";
    for (int gi : r.otherOrigins) textEvent(a, gi, out);
  }
  if (!r.contexts.empty()) {
    out << "\nCONTEXT (not failures by themselves):\n";
    for (size_t i = 0; i < r.contexts.size() && i < 8; ++i) textEvent(a, r.contexts[i], out);
  }
  if (!r.timeline.empty()) {
    out << "\nTIMELINE (first occurrence of each event):\n";
    for (size_t i = 0; i < r.timeline.size() && static_cast<int>(i) < o.maxTimeline; ++i) {
      const EventGroup& g = gs[r.timeline[i]];
      std::string t = formatTime(g.first, a.defaultYear());
      char line[96];
      std::snprintf(line, sizeof(line), "  %-26s %-14s %-7s ", t.empty() ? "(no stamp)" : t.c_str(),
                    rankOf(g.first).c_str(), sigClassName(g.cls));
      out << line << a.catalog().sig(g.sig).id << "  " << where(a, g.first) << "\n";
    }
    if (static_cast<int>(r.timeline.size()) > o.maxTimeline)
      out << "  ... " << r.timeline.size() - o.maxTimeline << " more\n";
  }
  const std::vector<std::string> facts = environmentFacts(a.env());
  if (!facts.empty()) {
    out << "\nENVIRONMENT (versions and GPUs the logs state):\n";
    for (const auto& f : facts) out << "  " << f << "\n";
    if (r.status != Result::kRootCause && r.status != Result::kInsufficient)
      for (const auto& n : r.envNotes) out << "  note: " << wrap(n, 8) << "\n";
  }
  if (!r.orderingNotes.empty()) {
    out << "\nORDERING:\n";
    for (const auto& n : r.orderingNotes) out << "  " << n << "\n";
  }
  if (o.contextLines > 0 && r.rootGroup >= 0 && !gs[r.rootGroup].context.empty()) {
    const EventGroup& g = gs[r.rootGroup];
    out << "\nLINES AROUND THE EVIDENCE (" << fileName(a, g.first.file) << "):\n";
    for (const auto& [ln, t] : g.context) {
      char b[32];
      std::snprintf(b, sizeof(b), "%s%7llu | ", ln == g.first.line ? "> " : "  ", static_cast<unsigned long long>(ln));
      out << b << t << "\n";
    }
  }
}

}  // namespace

void writeJson(const Analyzer& a, const Result& r, const ReportOptions& o, std::ostream& out) {
  (void)o;
  const auto& gs = a.groups();
  const char* status = r.status == Result::kRootCause      ? "root_cause"
                       : r.status == Result::kInsufficient ? "insufficient_evidence"
                       : r.status == Result::kEchoesOnly   ? "echoes_only"
                                                           : "no_evidence";
  out << "{\"schema\":\"arfuse.triage.v1\",\"status\":\"" << status << "\",\"exit_code\":" << exitCodeOf(r)
      << ",\"verdict\":" << jstr(r.verdict) << ",\"warnings\":[";
  for (size_t i = 0; i < a.inputWarnings().size(); ++i) out << (i ? "," : "") << jstr(a.inputWarnings()[i]);
  out << "],\"skipped_inputs\":" << a.skippedInputs() << ",\"inputs\":[";
  for (size_t i = 0; i < a.inputs().size(); ++i) {
    const auto& in = a.inputs()[i];
    out << (i ? "," : "") << "{\"path\":" << jstr(in.path) << ",\"compression\":" << jstr(in.compression)
        << ",\"lines\":" << in.lines << ",\"bytes\":" << in.bytes << ",\"windowed_lines\":" << in.windowedLines
        << ",\"error\":" << (in.error.empty() ? "null" : jstr(in.error)) << "}";
  }
  out << "],\"nranks\":";
  if (r.nranks > 0)
    out << r.nranks << ",\"nranks_source\":" << jstr(r.nranksSource);
  else
    out << "null,\"nranks_source\":null";
  out << ",\"root_cause\":";
  if (r.status == Result::kInsufficient) out << "null,\"symptom\":";
  if (r.status == Result::kRootCause || r.status == Result::kInsufficient) {
    EventGroup all = mergedBySig(a, r.rootGroup);
    const EventGroup& g = gs[r.rootGroup];
    EventGroup shown = g;
    shown.ranks = all.ranks;
    shown.procs = all.procs;
    shown.count = all.count;
    out << "{\"confidence\":" << jstr(r.confidence) << ",\"headline\":" << jstr(g.detail("headline"))
        << ",\"explains_echo_lines\":" << echoCount(a, r) << ",\"explains_surface\":"
        << (r.explainedSurface >= 0 ? jstr(a.catalog().sig(gs[r.explainedSurface].sig).id) : std::string("null"))
        << ",\"event\":";
    jsonEvent(a, shown, r.nranks, true, out);
    out << "}";
  } else {
    out << "null";
  }
  auto list = [&](const char* name, const std::vector<int>& v, bool full) {
    out << ",\"" << name << "\":[";
    for (size_t i = 0; i < v.size(); ++i) {
      out << (i ? "," : "");
      jsonEvent(a, gs[v[i]], r.nranks, full, out);
    }
    out << "]";
  };
  list("echoes", r.echoes, false);
  list("other_origins", r.otherOrigins, true);
  list("context_events", r.contexts, false);
  out << ",\"timeline\":[";
  for (size_t i = 0; i < r.timeline.size(); ++i) {
    const EventGroup& g = gs[r.timeline[i]];
    out << (i ? "," : "") << "{\"id\":" << jstr(a.catalog().sig(g.sig).id) << ",\"class\":" << jstr(sigClassName(g.cls))
        << ",\"at\":";
    jsonOcc(a, g.first, out);
    out << "}";
  }
  out << "],\"torchrun_failures\":[";
  for (size_t i = 0; i < a.torchrunFailures().size(); ++i) {
    const auto& f = a.torchrunFailures()[i];
    out << (i ? "," : "") << "{\"rank\":" << f.rank << ",\"exitcode\":" << jstr(f.exitcode)
        << ",\"first\":" << (f.first ? "true" : "false") << ",\"traceback\":" << jstr(f.traceback) << "}";
  }
  out << "],\"environment\":{\"facts\":[";
  const std::vector<std::string> facts = environmentFacts(a.env());
  for (size_t i = 0; i < facts.size(); ++i) out << (i ? "," : "") << jstr(facts[i]);
  out << "],\"notes\":[";
  for (size_t i = 0; i < r.envNotes.size(); ++i) out << (i ? "," : "") << jstr(r.envNotes[i]);
  out << "]},\"capture\":[";
  for (size_t i = 0; i < r.capture.size(); ++i) out << (i ? "," : "") << jstr(r.capture[i]);
  out << "],\"ordering_notes\":[";
  for (size_t i = 0; i < r.orderingNotes.size(); ++i) out << (i ? "," : "") << jstr(r.orderingNotes[i]);
  out << "]}\n";
}

}  // namespace triage
}  // namespace arfuse
