#include "analyzer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "analyzer_state.h"
#include "errorline.h"
#include "text.h"

namespace arfuse {
namespace triage {

namespace {

const std::vector<std::string>& extraLiterals() {
  static const std::vector<std::string> v = {
      "Traceback (most recent call last)",
      "The above exception was the direct cause",
      "During handling of the above exception",
      "(most recent call first)",
      "Fatal Python error",
      "NCCL INFO",
      "arfuse-flight-recorder",
      "arfuse-error-record",
      "epoch=",
      "Root Cause (first observed failure)",
      "Failures:",
      "tp_size",
      "world_size",
      "nranks=",
      "tensor_parallel_size",
      "arfuse-dump-note",
      "Last error:",
      "File \"",
  };
  return v;
}
const char* kHintKeys[] = {"tp_size", "world_size", "nranks=", "tensor_parallel_size"};

// Words that make a line a candidate for the grep floor (errorline.cc decides), and the literals that
// announce a version or GPU (environment.cc reads them): one bit each, many words.
std::vector<std::pair<std::string, int>> groupedLiterals() {
  std::vector<std::pair<std::string, int>> v;
  for (const char* w : {"error",         "erro[",
                        "fail",          "fatal",
                        "exception",     "abort",
                        "panic",         "[E]",
                        "[F]",           "killed",
                        "unable to",     "cannot ",
                        "could not",     "can't ",
                        "not supported", "unsupported",
                        "incompatible",  "segmentation",
                        "core dumped",   "assert",
                        "guarantee(",    "exit code",
                        "exited with",   "exit status",
                        "no such file",  "permission denied",
                        "out of memory", "unsatisfied",
                        "fault",         "critical"})
    v.emplace_back(w, 18);
  for (const auto& w : envLiterals()) v.emplace_back(w, 19);
  return v;
}

constexpr size_t kMaxGroups = 20000;
constexpr size_t kMaxRecords = 65536;  // error records, torchrun failures: kept, the rest counted
constexpr int kInferWindow = 20;       // an unprefixed line inherits the rank of a prefixed line this close above

// Masks digits and hex words so the same message from different ranks / requests groups together.
void appendNormalised(std::string_view s, std::string* out) {
  // A C++ exception's "what():" line repeats the message printed before it: group them together.
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  if (s.substr(0, 7) == "what():") s.remove_prefix(7);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  char buf[240];
  size_t n = 0;
  for (size_t i = 0; i < s.size() && n < sizeof(buf);) {
    const char c = s[i];
    if (c >= '0' && c <= '9') {
      while (i < s.size() && (std::isxdigit(static_cast<unsigned char>(s[i])) || s[i] == 'x' || s[i] == '.')) ++i;
      buf[n++] = '#';
    } else {
      buf[n++] = c;
      ++i;
    }
  }
  out->append(buf, n);
}

// Value of "key=value" in a space-separated token list.
std::string_view tokenValue(std::string_view s, std::string_view key) {
  size_t p = 0;
  while ((p = s.find(key, p)) != std::string_view::npos) {
    if ((p == 0 || s[p - 1] == ' ') && p + key.size() < s.size() && s[p + key.size()] == '=') {
      size_t b = p + key.size() + 1, e = s.find(' ', b);
      return s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b);
    }
    p += key.size();
  }
  return {};
}

long toLong(std::string_view v, long dflt = -1) {
  if (v.empty()) return dflt;
  std::string s(v);
  char* end = nullptr;
  long r = std::strtol(s.c_str(), &end, 10);
  return end == s.c_str() ? dflt : r;
}

}  // namespace

bool startsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string_view trimLeft(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

void EventGroup::addRank(int r) {
  if (ranks.count(r)) return;
  if (ranks.size() < kMaxRanksKept)
    ranks.insert(r);
  else
    ++moreRanks;
}

int Analyzer::clampRank(long r) {
  if (r < 0) return -1;
  if (r > kMaxRank) {
    ++ranksOutOfRange_;
    return -1;
  }
  return static_cast<int>(r);
}

std::string EventGroup::detail(const std::string& key) const {
  for (const auto& [k, v] : details)
    if (k == key) return v;
  return {};
}

void EventGroup::setDetail(const std::string& key, const std::string& value) {
  for (auto& [k, v] : details)
    if (k == key) {
      v = value;
      return;
    }
  details.emplace_back(key, value);
}

Analyzer::Analyzer(const Catalog& catalog, int contextLines, size_t memoEntries)
    : catalog_(catalog),
      matcher_(new Matcher(catalog, extraLiterals(), groupedLiterals(), memoEntries)),
      sigFloor_(catalog.find("grep.error_line")),
      sigFloorWeak_(catalog.find("grep.error_line_weak")),
      floorMemo_(new TextMemo<ErrorLine>(memoEntries, 4096, 2u << 20)),
      memoEntries_(memoEntries),
      groupMemo_(new TextMemo<int>(memoEntries, 4096, 2u << 20)),
      contextLines_(contextLines) {}

Analyzer::~Analyzer() = default;

int Analyzer::beginFile(const std::string& path) {
  InputStats in;
  in.path = path;
  inputs_.push_back(in);
  fs_ = std::make_unique<FileState>();
  fs_->file = static_cast<int>(inputs_.size()) - 1;
  // A per-rank file name ("rank5.log", "worker_tp3.log.gz") gives lines without a prefix a rank.
  std::string base = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  std::string lower;
  for (char c : base) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  for (const char* key : {"rank", "tp"}) {
    size_t p = lower.find(key);
    if (p == std::string::npos) continue;
    size_t d = p + std::strlen(key);
    while (d < lower.size() && (lower[d] == '_' || lower[d] == '-')) ++d;
    if (d < lower.size() && std::isdigit(static_cast<unsigned char>(lower[d]))) {
      fs_->defaultRank = std::atoi(lower.c_str() + d);
      break;
    }
  }
  return fs_->file;
}

void Analyzer::endFile(const std::string& compression, uint64_t bytes, uint64_t windowedLines,
                       const std::string& error) {
  InputStats& in = inputs_.back();
  in.compression = compression;
  in.bytes = bytes;
  in.windowedLines = windowedLines;
  in.error = error;
  if (fs_) {
    for (auto& [key, st] : fs_->streams)
      if (st.state == Stream::kFrames) cutTraceback(&st);  // the file ends inside a traceback
    if (fs_->haveFailure && fs_->failure.rank >= 0 && torchrun_.size() < kMaxRecords) torchrun_.push_back(fs_->failure);
  }
  fs_.reset();
}

uint64_t Analyzer::totalLines() const {
  uint64_t n = 0;
  for (const auto& in : inputs_) n += in.lines;
  return n;
}

uint64_t Analyzer::totalBytes() const {
  uint64_t n = 0;
  for (const auto& in : inputs_) n += in.bytes;
  return n;
}

// Attributes a line to a process stream (its rank or process, or the unprefixed stream that an open
// traceback or a recent prefixed line lends it) and fills its occurrence; returns the stream's key.
std::string Analyzer::attribute(const LineInfo& info, bool indented, Occurrence* occ) {
  FileState& fs = *fs_;
  occ->file = fs.file;
  occ->line = fs.lineNo;
  occ->rank = info.rank;
  occ->proc = std::string(info.proc.substr(0, 96));
  std::string key;
  if (info.prefixed || info.rank >= 0) {
    key = info.rank >= 0 ? "r" + std::to_string(info.rank) : "p" + occ->proc;
    fs.lastPrefixedRank = info.rank;
    fs.lastPrefixedLine = fs.lineNo;
  } else if (!fs.active.empty()) {
    Stream& a = fs.streams[fs.active];
    if (indented || a.state != Stream::kIdle || a.faultState != 0 || a.lastErrorPending) {
      key = fs.active;
      occ->rank = a.rank;
      occ->rankInferred = a.rankInferred;
      occ->proc = a.proc;
    }
  }
  if (key.empty() && !info.prefixed && info.rank < 0) {
    occ->rank = fs.defaultRank;
    if (occ->rank < 0 && info.dev >= 0) occ->rank = info.dev;  // NCCL "[dev]": the rank on one node
    if (occ->rank < 0 && fs.lastPrefixedRank >= 0 && fs.lineNo - fs.lastPrefixedLine <= kInferWindow) {
      occ->rank = fs.lastPrefixedRank;
      occ->rankInferred = true;
    }
    key = "u";
  }
  if (info.stamp.valid()) {
    occ->stamp = info.stamp;
  } else if (fs.lastStamp.valid()) {
    occ->stamp = fs.lastStamp;
    occ->stampApprox = true;
  }
  occ->uptime = info.uptime;
  return key;
}

void Analyzer::feed(std::string_view line, bool sameLine) {
  FileState& fs = *fs_;
  if (!sameLine || fs.lineNo == 0) {
    ++fs.lineNo;
    ++inputs_.back().lines;
  }
  if (contextLines_ > 0 && !fs.pendingAfter.empty() && !sameLine) {
    for (int g : fs.pendingAfter) {
      groups_[g].context.emplace_back(fs.lineNo, clip(line, kMaxText));
      --groups_[g].contextAfterLeft;
    }
    fs.pendingAfter.erase(std::remove_if(fs.pendingAfter.begin(), fs.pendingAfter.end(),
                                         [&](int g) { return groups_[g].contextAfterLeft <= 0; }),
                          fs.pendingAfter.end());
  }

  LineInfo info;
  parseLine(line, &info);
  if (info.rank > kMaxRank) {
    ++ranksOutOfRange_;
    info.rank = -1;
  }
  if (info.dev > kMaxRank) info.dev = -1;
  if (info.stamp.valid()) {
    fs.lastStamp = info.stamp;
    if (info.stamp.year > defaultYear_ && info.stamp.year < 10000) defaultYear_ = info.stamp.year;
  }
  SigMatch m;
  uint32_t extra = 0;
  bool hit = matcher_->match(line, info.body, &m, &extra, /*details=*/false);
  // A dump's notes restate its error record and the log lines for people: never an event.
  bool dumpNote = false;
  if (extra & kDumpNote) {
    const size_t dn = info.body.find("arfuse-dump-note");
    dumpNote = dn != std::string_view::npos && trimLeft(info.body.substr(0, dn)).empty();
    if (dumpNote) hit = false;
  }
  const bool indented = !info.body.empty() && (info.body[0] == ' ' || info.body[0] == '\t');

  Occurrence occ;
  const std::string key = attribute(info, indented, &occ);
  continueMessage(info, key, extra, sameLine);
  if (extra & kEnvFact) env_.note(info.body);

  std::vector<std::pair<std::string, std::string>> details = std::move(m.details);
  if (std::strcmp(info.format, "arfuse") == 0) handleArfuseTokens(info.body, &occ, &details);

  // A dump's error record names its rank in a token, not in a prefix.
  if (extra & kErrorRecord) {
    const size_t at = info.body.find("arfuse-error-record");
    const long rank = at == std::string_view::npos ? -1 : toLong(tokenValue(info.body.substr(at), "rank"));
    const int r = clampRank(rank);
    if (r >= 0) {
      occ.rank = r;
      occ.rankInferred = false;
    }
  }

  // Python tracebacks and faulthandler, per stream.
  const uint32_t kStreamBits =
      kTraceback | kChainDirect | kChainDuring | kFaultThread | kFatalPython | kLastError | kFrameLine;
  Stream* st = nullptr;
  if ((extra & kStreamBits) || !fs.active.empty() || fs.streams.count(key)) {
    auto it = fs.streams.find(key);
    if (it == fs.streams.end() && (extra & kStreamBits)) {
      if (fs.streams.size() >= FileState::kMaxStreams) {  // a log with more processes than that: forget idle ones
        for (auto i = fs.streams.begin(); i != fs.streams.end();)
          i = (i->second.state == Stream::kIdle && i->first != fs.active) ? fs.streams.erase(i) : std::next(i);
      }
      if (fs.streams.size() < FileState::kMaxStreams) it = fs.streams.emplace(key, Stream()).first;
    }
    if (it != fs.streams.end()) st = &it->second;
  }

  int g = -1;
  if (hit) {
    // A source line shown in a traceback ('raise OutOfResources(...)') is code, not a message: it only
    // counts when the traceback is cut off right after it (cutTraceback).
    // Capture groups cost a second, slower engine: taken for a new event, or where every occurrence counts.
    const bool isCode = st && st->state == Stream::kFrames && isSourceLine(st->prevWasFrame, info.body);
    const Signature& ms = catalog_.sig(m.sig);
    const int known = isCode ? -1 : findGroup(m.sig, info.body);
    if (!ms.extract.empty() && !ms.everyOccurrence && (isCode || known < 0)) {
      // (a repeated line of a known event keeps the details its first occurrence gave)
      SigMatch full;
      if (matcher_->matchOne(m.sig, info.body, &full))
        for (auto& d : full.details) details.insert(details.begin(), std::move(d));
    }
    if (isCode) {
      st->codeSig = m.sig;
      st->codeDetails = details;
    } else {
      g = addEvent(m.sig, catalog_.sig(m.sig).cls, info, line, occ, details, known);
      if (g >= 0 && groups_[g].cls == SigClass::kOrigin && continuesOnNextLine(info.body))
        startContinuation(g, key, info);
    }
  }

  bool consumed = false;
  if (st) {
    const int tg = tracebackLine(st, key, info, line, occ, extra, g);
    consumed = tg != -2;
    if (tg >= 0) g = tg;
  }
  if (!hit && !consumed && g < 0) {
    g = bareException(info, line, occ);
    if (g >= 0) startContinuation(g, key, info);
  }
  // NCCL <= 2.3 wrote "WARN msg" without the word NCCL: a WARN line no signature knows is NCCL's warning.
  if (!hit && g < 0 && info.level == 'W' && std::strcmp(info.format, "nccl") == 0) {
    static const int ncclWarn = catalog_.find("nccl.warn");
    if (ncclWarn >= 0) g = addEvent(ncclWarn, catalog_.sig(ncclWarn).cls, info, line, occ, {});
  }
  // The grep floor: an error line that no signature knows is still evidence (never "no error line").
  if (!hit && !consumed && g < 0 && !dumpNote && (extra & kFloorWord) && !(extra & (kTraceback | kFrameLine)) &&
      fs.summaryLeft <= 0 && std::strcmp(info.format, "arfuse") != 0)
    g = floorLine(info, line, occ, key);

  if (std::strcmp(info.format, "nccl") == 0) ncclChain(info, extra, g);
  nativeFrames(key, info, g);

  if (extra & (kFrHeader | kErrorRecord | kEpoch | kDumpNote))
    handleFlightRecorder(info.body, occ, extra);
  else
    fs.frRank = -1;
  if ((extra & (kTorchRootCause | kTorchFailures)) || fs.summaryLeft > 0) handleTorchrunSummary(info.body, occ);
  if (extra & (kHintTp | kHintWorld | kHintNranks | kHintTpVllm)) rankHints(line, extra);

  if (contextLines_ > 0 && !sameLine) {
    fs.ring.emplace_back(fs.lineNo, clip(line, kMaxText));
    if (fs.ring.size() > static_cast<size_t>(contextLines_)) fs.ring.pop_front();
  }
}

// A crash on a signal prints no cause, but the handlers that report it (absl / Ray, gdb, backtrace_symbols)
// print native frames right after it: the first one naming a function says where it crashed.
void Analyzer::nativeFrames(const std::string& key, const LineInfo& info, int g) {
  FileState& fs = *fs_;
  if (g >= 0 && catalog_.sig(groups_[g].sig).symptom) {
    if (groups_[g].detail("crashed_in").empty() && groups_[g].detail("crashed_at").empty()) {
      fs.symptomGroup = g;
      fs.symptomLine = fs.lineNo;
      fs.symptomKey = key;
    }
    return;
  }
  if (fs.symptomGroup < 0) return;
  if (fs.lineNo > fs.symptomLine + 12 || key != fs.symptomKey) {
    if (fs.lineNo > fs.symptomLine + 12) fs.symptomGroup = -1;
    return;
  }
  const std::string fn = nativeFrameFunction(info.body);
  if (fn.empty()) return;
  groups_[fs.symptomGroup].setDetail("crashed_in", fn + "() (native frame)");
  fs.symptomGroup = -1;
}

// NCCL: "NCCL INFO file.cc:123 -> 2" lines are the return chain of the WARN above them (same host:pid).
void Analyzer::ncclChain(const LineInfo& info, uint32_t extra, int g) {
  FileState& fs = *fs_;
  if (info.level == 'W' && g >= 0) {
    if (fs.ncclWarn.size() < FileState::kMaxStreams || fs.ncclWarn.count(std::string(info.ncclStream)))
      fs.ncclWarn[std::string(info.ncclStream)] = g;
    if (groups_[g].chainStream.empty()) groups_[g].chainStream = std::string(info.ncclStream.substr(0, 96));
  } else if ((extra & kNcclInfo) && !fs.ncclWarn.empty()) {
    std::string_view b = info.body;
    size_t arrow = b.rfind(" -> ");
    if (arrow != std::string_view::npos && arrow + 4 < b.size() &&
        b.find_first_not_of("0123456789", arrow + 4) == std::string_view::npos) {
      auto w = fs.ncclWarn.find(std::string(info.ncclStream));
      if (w != fs.ncclWarn.end()) {
        EventGroup& e = groups_[w->second];
        if (e.chainStream == info.ncclStream && e.chain.size() < 12) {
          std::string_view frame = b.substr(std::min(b.size(), size_t{10}));  // after "NCCL INFO "
          e.chain.emplace_back(clip(trimLeft(frame), 160));
        }
      }
    }
  }
}

// The declared world size: the largest tp_size / world_size / nranks= / tensor_parallel_size a line
// names, up to kMaxRank + 1 (larger claims are counted and ignored: a claim is not a count).
void Analyzer::rankHints(std::string_view line, uint32_t extra) {
  for (int b = 0; b < 4; ++b) {
    if (!(extra & (kHintTp << b))) continue;
    std::string_view k = kHintKeys[b];
    for (size_t p = line.find(k); p != std::string_view::npos; p = line.find(k, p)) {
      bool whole = p == 0 || !(std::isalnum(static_cast<unsigned char>(line[p - 1])) || line[p - 1] == '_');
      p += k.size();
      while (p < line.size() && line[p] != '\0' && std::strchr(" =:\"'", line[p])) ++p;
      long v = toLong(line.substr(p, 12), 0);
      if (whole && v > kMaxRank + 1) ++nranksClaimIgnored_;
      if (whole && v > nranksHint_ && v <= kMaxRank + 1) {
        nranksHint_ = static_cast<int>(v);
        std::string kk(k);
        if (!kk.empty() && kk.back() == '=') kk.pop_back();
        nranksHintSource_ = kk + "=" + std::to_string(v);
      }
    }
  }
}

std::string Analyzer::groupKey(int sig, std::string_view body) const {
  std::string key = std::to_string(sig);
  key += '\x1f';
  appendNormalised(body, &key);
  return key;
}

int Analyzer::findGroup(int sig, std::string_view body) {
  const auto mk = TextMemo<int>::key(body, static_cast<uint64_t>(sig));
  if (const int* g = groupMemo_->find(mk)) return *g;
  auto it = groupIndex_.find(groupKey(sig, body));
  if (it == groupIndex_.end()) return -1;
  groupMemo_->put(mk, it->second);
  return it->second;
}

int Analyzer::addEvent(int sig, SigClass cls, const LineInfo& info, std::string_view raw, const Occurrence& occ,
                       const std::vector<std::pair<std::string, std::string>>& details, int known) {
  int g = known >= 0 ? known : findGroup(sig, info.body);
  if (g < 0) {
    if (groups_.size() >= kMaxGroups) {
      ++droppedGroups_;
      return -1;
    }
    g = static_cast<int>(groups_.size());
    groupIndex_.emplace(groupKey(sig, info.body), g);
    groupMemo_->put(info.body, static_cast<uint64_t>(sig), g);
    groups_.emplace_back();
    EventGroup& e = groups_.back();
    e.sig = sig;
    e.cls = cls;
    e.text = clip(trimLeft(info.body), kMaxText);
    e.raw = clip(raw, kMaxText);
    e.first = occ;
    e.details = details;
    if (occ.rankInferred)
      e.notes.push_back("rank " + std::to_string(occ.rank) +
                        " is inferred: the line has no prefix; the nearest prefixed line above it is that rank's");
    if (contextLines_ > 0 && fs_) {
      for (const auto& l : fs_->ring) e.context.push_back(l);
      e.context.emplace_back(occ.line, clip(raw, kMaxText));
      e.contextAfterLeft = contextLines_;
      fs_->pendingAfter.push_back(g);
    }
  }
  EventGroup& e = groups_[g];
  ++e.count;
  if (occ.rank >= 0) {
    e.addRank(occ.rank);
    if (!occ.rankInferred) maxRank_ = std::max(maxRank_, occ.rank);
  } else if (e.procs.size() < 64) {
    e.procs.insert(occ.proc.empty() ? "unprefixed" : occ.proc);
  }
  if (occ.uptime >= 0 && !occ.stamp.valid())
    ++uptimeEvents_;
  else if (occ.stamp.valid() && !occ.stampApprox)
    ++stampedEvents_;
  else
    ++unstampedEvents_;
  // Facts for the cross-rank analyses, from every occurrence.
  std::string seq, lastDone, waitedFor, code, peer, waitsWith;
  for (const auto& [k, v] : details) {
    if (k == "waits_with")
      waitsWith = v;
    else if (k == "seq")
      seq = v;
    else if (k == "last_completed")
      lastDone = v;
    else if (k == "waited_for")
      waitedFor = v;
    else if (k == "code")
      code = v;
    else if (k == "peer")
      peer = v;
  }
  if (waitedFor.empty() && code == "arfusePeerTimeout") waitedFor = peer;
  if (!waitsWith.empty()) {  // "rank 1 (host a, local rank 1), rank 3 (host b, local rank 1)"
    std::set<int> with;
    for (size_t at = waitsWith.find("rank "); at != std::string::npos; at = waitsWith.find("rank ", at + 5)) {
      if (at >= 6 && waitsWith.compare(at - 6, 6, "local ") == 0) continue;  // "local rank L"
      const char* p = waitsWith.c_str() + at + 5;
      if (*p >= '0' && *p <= '9') with.insert(clampRank(std::strtol(p, nullptr, 10)));
    }
    if (!with.empty()) ncclWaits_.emplace_back(occ.rank, std::move(with));
  }
  if (occ.rank >= 0) {
    if (!seq.empty()) seqByRank_.emplace(occ.rank, toLong(seq));
    if (!lastDone.empty()) lastCompletedByRank_.emplace(occ.rank, toLong(lastDone));
    const int waited = waitedFor.empty() ? -1 : clampRank(toLong(waitedFor));
    if (waited >= 0) waits_.emplace(occ.rank, std::make_pair(waited, g));
  }
  return g;
}

// arfuse LEVEL key=value... [sm_NN] [file.cc:123] free text [; next: remedy]
void Analyzer::handleArfuseTokens(std::string_view body, Occurrence* occ,
                                  std::vector<std::pair<std::string, std::string>>* details) {
  static const char* kKeys[] = {"rank", "dev",  "call",  "op",    "bytes", "dtype",   "path",
                                "code", "peer", "block", "epoch", "phase", "fallback"};
  size_t p = body.find(' ', 7);
  if (p == std::string_view::npos) return;
  ++p;
  auto has = [&](const std::string& k) {
    for (const auto& d : *details)
      if (d.first == k) return true;
    return false;
  };
  while (p < body.size()) {
    size_t e = body.find(' ', p);
    if (e == std::string_view::npos) e = body.size();
    std::string_view tok = body.substr(p, e - p);
    size_t eq = tok.find('=');
    bool known = false;
    if (eq != std::string_view::npos) {
      std::string_view k = tok.substr(0, eq);
      for (const char* kk : kKeys) known = known || k == kk;
      if (known) {
        std::string ks(k), vs = clip(tok.substr(eq + 1), Matcher::kMaxDetail);
        const int r = ks == "rank" ? clampRank(toLong(vs)) : -1;
        if (r >= 0) {  // "rank=-": no communicator involved
          occ->rank = r;
          occ->rankInferred = false;
        }
        if (!has(ks)) details->emplace_back(ks, vs);
      }
    } else if (tok.size() > 3 && startsWith(tok, "sm_")) {
      known = true;
      if (!has("sm")) details->emplace_back("sm", clip(tok, 32));
    } else {
      size_t colon = tok.rfind(':');
      size_t dot = tok.find('.');
      if (colon != std::string_view::npos && dot != std::string_view::npos && dot < colon &&
          tok.find_first_not_of("0123456789", colon + 1) == std::string_view::npos && colon + 1 < tok.size()) {
        if (!has("site")) details->emplace_back("site", clip(tok, 160));
        p = e + 1;
        break;  // free text follows the site
      }
    }
    if (!known) break;
    p = e + 1;
  }
  if (p < body.size()) {
    std::string_view text = body.substr(p);
    size_t nx = text.find("next: ");
    if (nx != std::string_view::npos) {
      if (!has("next")) details->emplace_back("next", clip(text.substr(nx + 6), kMaxText));
      text = text.substr(0, nx);
      while (!text.empty() && (text.back() == ' ' || text.back() == ';')) text.remove_suffix(1);
    }
    if (!has("message")) details->emplace_back("message", clip(text, kMaxText));
  }
}

void Analyzer::handleFlightRecorder(std::string_view body, const Occurrence& occ, uint32_t extra) {
  FileState& fs = *fs_;
  size_t at = body.find("arfuse-");
  if ((extra & kFrHeader) && at != std::string_view::npos && startsWith(body.substr(at), "arfuse-flight-recorder")) {
    std::string_view b = body.substr(at);
    int rank = clampRank(toLong(tokenValue(b, "rank")));
    if (rank < 0) return;
    FrRank& r = fr_[rank];
    r.dev = clampRank(toLong(tokenValue(b, "dev")));
    const long claimed = toLong(tokenValue(b, "nranks"), 0);
    if (claimed > kMaxRank + 1) ++nranksClaimIgnored_;  // never sized by: a claim is not a count
    r.nranks = claimed > 0 && claimed <= kMaxRank + 1 ? static_cast<int>(claimed) : 0;
    r.header = occ;
    r.header.rank = rank;
    r.header.rankInferred = false;
    fs.frRank = rank;
    if (r.nranks > nranksHint_) {
      nranksHint_ = r.nranks;
      nranksHintSource_ = "flight-recorder nranks=" + std::to_string(r.nranks);
    }
    return;
  }
  if ((extra & kErrorRecord) && at != std::string_view::npos && startsWith(body.substr(at), "arfuse-error-record")) {
    std::string_view b = body.substr(at);
    int rank = clampRank(toLong(tokenValue(b, "rank")));
    int peer = clampRank(toLong(tokenValue(b, "peer")));
    if (errorRecords_.size() + otherRecords_.size() >= kMaxRecords) {
      ++droppedRecords_;
      return;
    }
    // code= is absent in older dumps (every record was a timeout then), a word in newer ones.
    std::string code(tokenValue(b, "code"));
    if (code.empty() || code == "peer_timeout" || code == "1" || code == "arfusePeerTimeout") {
      if (rank >= 0 && peer >= 0) errorRecords_.emplace_back(rank, peer);
    } else if (rank >= 0) {
      OtherRecord o;
      o.rank = rank;
      o.peer = peer;
      o.epoch = toLong(tokenValue(b, "epoch"));
      o.code = code == "2" ? "mismatch" : code == "3" ? "concurrent" : clip(code, 32);
      o.mine = clip(tokenValue(b, "mine"), 96);
      o.theirs = clip(tokenValue(b, "theirs"), 96);
      o.at = occ;
      o.at.rank = rank;
      o.at.rankInferred = false;
      otherRecords_.push_back(std::move(o));
    }
    return;
  }
  if ((extra & kDumpNote) && at != std::string_view::npos && startsWith(body.substr(at), "arfuse-dump-note")) {
    std::string_view b = body.substr(at);
    int rank = clampRank(toLong(tokenValue(b, "rank")));
    size_t le = b.find(" last_error: ");
    if (fr_.count(rank) && le != std::string_view::npos) fr_[rank].lastError = clip(b.substr(le + 13), kMaxText);
    return;
  }
  std::string_view b = trimLeft(body);
  if (fs.frRank >= 0 && startsWith(b, "entry=")) {
    FrRank& r = fr_[fs.frRank];
    long epoch = toLong(tokenValue(b, "epoch"));
    std::string_view end = tokenValue(b, "end_ns");
    if (epoch < 0) return;
    if (end == "pending") {
      if (r.firstPending < 0 || epoch < r.firstPending) {
        r.firstPending = epoch;
        r.pendingOp = clip(tokenValue(b, "op"), 64);
      }
    } else {
      r.lastCompleted = std::max(r.lastCompleted, epoch);
    }
  } else {
    fs.frRank = -1;
  }
}

// torchelastic's ChildFailedError summary:
//   Root Cause (first observed failure):
//   [0]:
//     rank      : 5 (local_rank: 5)
//     exitcode  : -11 (pid: 48213)
//     traceback : Signal 11 (SIGSEGV) received by PID 48213
void Analyzer::handleTorchrunSummary(std::string_view body, const Occurrence& occ) {
  FileState& fs = *fs_;
  std::string_view b = trimLeft(body);
  auto flush = [&]() {
    if (fs.haveFailure && fs.failure.rank >= 0) {
      if (torchrun_.size() < kMaxRecords)
        torchrun_.push_back(fs.failure);
      else
        ++droppedRecords_;
    }
    fs.haveFailure = false;
  };
  if (b.find("Root Cause (first observed failure)") != std::string_view::npos) {
    flush();
    fs.summaryLeft = 16;
    fs.summaryFirst = true;
    return;
  }
  if (startsWith(b, "Failures:")) {
    flush();
    fs.summaryLeft = 40;
    fs.summaryFirst = false;
    return;
  }
  if (fs.summaryLeft <= 0) return;
  --fs.summaryLeft;
  if (startsWith(b, "====") || startsWith(b, "----")) {
    flush();
    if (startsWith(b, "====")) fs.summaryLeft = 0;
    return;
  }
  if (b.size() > 2 && b[0] == '[' && std::isdigit(static_cast<unsigned char>(b[1]))) {
    flush();
    fs.failure = TorchrunFailure();
    fs.failure.first = fs.summaryFirst;
    fs.failure.at = occ;
    fs.haveFailure = true;
    return;
  }
  if (!fs.haveFailure) return;
  size_t colon = b.find(':');
  if (colon == std::string_view::npos) return;
  std::string_view k = b.substr(0, colon);
  while (!k.empty() && k.back() == ' ') k.remove_suffix(1);
  std::string_view v = trimLeft(b.substr(colon + 1));
  if (k == "rank")
    fs.failure.rank = clampRank(toLong(v));
  else if (k == "exitcode")
    fs.failure.exitcode = clip(v.substr(0, v.find(' ')), 16);
  else if (k == "traceback")
    fs.failure.traceback = clip(v, 200);
  else if (k == "time")
    fs.failure.time = clip(v, 40);
}

}  // namespace triage
}  // namespace arfuse
