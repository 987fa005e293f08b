// What the catalogue does not know, read anyway:
//  - the grep floor: an error line no signature matches is still an event (grep.error_line), so a log
//    whose only error is in a format the catalogue has never seen never gets "no error line";
//  - messages that span lines (an exception whose message continues, an error line ending with ':')
//    are read whole, and matched again once whole;
//  - at the end, the error table explains the error each event captured (the same signature tells the
//    story of the error it quotes), and failures of the hardware or the driver take the workers' CUDA
//    errors as their consequences.
#include <algorithm>
#include <cstring>

#include "analyzer.h"
#include "analyzer_state.h"
#include "errorline.h"
#include "text.h"

namespace arfuse {
namespace triage {

namespace {

constexpr int kMaxContinuation = 3;  // lines a message may continue on

bool endsWithColon(std::string_view t) {
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
  return !t.empty() && t.back() == ':';
}

}  // namespace

bool continuesOnNextLine(std::string_view body) {
  const std::string_view t = trimLeft(body);
  return endsWithColon(t) || looksLikeException(t, true);
}

std::string nativeFrameFunction(std::string_view b) {
  std::string_view t = trimLeft(b);
  std::string_view fn;
  size_t p;
  if ((p = t.find("PC: @")) != std::string_view::npos || startsWith(t, "@ ")) {
    // absl / Ray failure handler: "PC: @ 0x7f0c73d2944a  (unknown)  addProxyOpIfNeeded()"
    std::string_view rest = t.substr(t.rfind(' ') == std::string_view::npos ? 0 : t.rfind(' ') + 1);
    fn = rest;
  } else if (startsWith(t, "#") && (p = t.find(" in ")) != std::string_view::npos) {
    fn = t.substr(p + 4, t.find(' ', p + 4) - (p + 4));  // gdb: "#0  0x... in ncclProxyProgress (..."
  } else if (startsWith(t, "File \"<unknown>\"") && (p = t.rfind(", in ")) != std::string_view::npos) {
    fn = t.substr(p + 5);  // vLLM's segfault handler: 'File "<unknown>", line 0, in cuMemcpyBatchAsync'
  } else if (!t.empty() && t[0] >= '0' && t[0] <= '9' && (p = t.find(" 0x")) != std::string_view::npos) {
    // glibc backtrace_symbols / TensorRT-LLM: "1       0x55af.. tensorrt_llm::common::throwRuntimeError(...) + 100"
    const size_t b2 = t.find(' ', p + 1);
    if (b2 == std::string_view::npos) return "";
    std::string_view rest = trimLeft(t.substr(b2));
    fn = rest.substr(0, std::min(rest.find('('), rest.find(" +")));
  }
  while (!fn.empty() && (fn.back() == ')' || fn.back() == '(')) fn.remove_suffix(1);
  if (fn.empty() || fn == "(unknown" || fn == "??" || fn.find('/') != std::string_view::npos || fn[0] == '[' ||
      fn == "__libc_start_main" || fn == "_start" || fn == "clone" || fn == "start_thread" || fn.size() > 160)
    return "";
  return std::string(fn);
}

int Analyzer::floorLine(const LineInfo& info, std::string_view raw, const Occurrence& occ, const std::string& key) {
  if (sigFloor_ < 0) return -1;
  // Error lines repeat like any other (a retry loop, every rank): classified once per text and level.
  const auto mk = TextMemo<ErrorLine>::key(info.body, static_cast<unsigned char>(info.level));
  const ErrorLine* known = floorMemo_->find(mk);
  const ErrorLine el = known ? *known : classifyErrorLine(info.body, info.level);
  if (!known) floorMemo_->put(mk, el);
  if (el.strength == 0) return -1;
  // An exception named inside the line ("ERROR: (Worker pid=7) ValueError: ...", "Worker failed with error
  // 'RuntimeError: ...'") is classified as the exception it is.
  int sig = el.warning || el.echoLike ? sigFloorWeak_ : sigFloor_;
  std::vector<std::pair<std::string, std::string>> details;
  if (el.exceptionAt != std::string_view::npos) {
    SigMatch bm;
    const std::string_view exc = info.body.substr(el.exceptionAt);
    if (matcher_->matchKind(SigWhen::kTracebackEnd, exc, &bm) && catalog_.sig(bm.sig).cls == SigClass::kOrigin &&
        catalog_.sig(bm.sig).weight > catalog_.sig(sig).weight && !el.warning && !el.echoLike) {
      sig = bm.sig;
      details = bm.details;
    }
  }
  const int g = addEvent(sig, catalog_.sig(sig).cls, info, raw, occ, details);
  if (g < 0) return g;
  FileState& fs = *fs_;
  fs.floorGroup = g;
  fs.floorLine = fs.lineNo;
  fs.floorKey = key;
  // logger.exception("msg") prints the message at the logger's level, then the traceback: a line written
  // that way, or ending with ':', announces the traceback that follows it. A tool's own error line (its
  // level in a tag of the message, "[TensorRT-LLM][ERROR] ...") does not: it is the origin Python re-raises.
  fs.floorAnnounces = info.level == 'E' || info.level == 'F' || endsWithColon(info.body);
  if (continuesOnNextLine(info.body)) startContinuation(g, key, info);
  return g;
}

void Analyzer::startContinuation(int g, const std::string& key, const LineInfo& info) {
  FileState& fs = *fs_;
  if (g < 0 || groups_[g].count != 1) return;  // only the first occurrence grows its text
  fs.contGroup = g;
  fs.contKey = key;
  fs.contLine = fs.lineNo;
  fs.contLeft = kMaxContinuation;
  fs.contFormat = info.format;
  fs.contLevel = info.level;
}

// The line right after a message of the same stream, written the same way (same logger format and
// level), that is not a frame, a traceback marker or blank, continues the message: it is appended, and
// the whole message is matched again (a signature may need both halves).
bool Analyzer::continueMessage(const LineInfo& info, const std::string& key, uint32_t extra, bool sameLine) {
  FileState& fs = *fs_;
  if (fs.contGroup < 0) return false;
  // A message that already ends a sentence (or a quoted reason) is complete.
  {
    std::string_view sofar = groups_[fs.contGroup].text;
    while (!sofar.empty() && sofar.back() == ' ') sofar.remove_suffix(1);
    if (!sofar.empty() && std::strchr(".!?'\")]", sofar.back()) != nullptr && !sameLine) {
      fs.contGroup = -1;
      return false;
    }
  }
  const std::string_view t = trimLeft(info.body);
  const bool ok = !sameLine && fs.lineNo == fs.contLine + 1 && fs.contLeft > 0 && key == fs.contKey &&
                  std::strcmp(info.format, fs.contFormat) == 0 && info.level == fs.contLevel && !t.empty() &&
                  !startsWith(t, "File \"") && t.find_first_not_of("^~ ") != std::string_view::npos &&
                  !(extra & (kTraceback | kChainDirect | kChainDuring | kFatalPython | kFaultThread));
  if (!ok) {
    if (!sameLine) fs.contGroup = -1;
    return false;
  }
  EventGroup& e = groups_[fs.contGroup];
  if (e.text.size() + t.size() + 1 > kMaxText) {
    fs.contGroup = -1;
    return false;
  }
  e.text += ' ';
  e.text.append(t.data(), t.size());
  fs.contLine = fs.lineNo;
  --fs.contLeft;
  // Matched again whole: a higher-weight origin the joined message names replaces the signature.
  SigMatch m;
  uint32_t ignored = 0;
  const Signature& cur = catalog_.sig(e.sig);
  bool better = matcher_->match(e.text, e.text, &m, &ignored) && catalog_.sig(m.sig).cls == SigClass::kOrigin &&
                catalog_.sig(m.sig).weight > cur.weight;
  if (!better && cur.when == SigWhen::kTracebackEnd) {
    SigMatch tm;
    if (matcher_->matchKind(SigWhen::kTracebackEnd, trimLeft(e.text), &tm) &&
        catalog_.sig(tm.sig).weight > cur.weight) {
      m = tm;
      better = true;
    }
  }
  if (better && e.cls != SigClass::kEcho) {
    e.sig = m.sig;
    e.cls = catalog_.sig(m.sig).cls;
    for (const auto& [k, v] : m.details) e.setDetail(k, v);
  }
  return true;
}

namespace {

// The settings a configuration error names: command-line flags ("--dtype=half") and `quoted` names, which
// are what the user changes.
std::string namedSettings(std::string_view text) {
  std::string out;
  auto add = [&](std::string_view v) {
    if (v.size() < 3 || v.size() > 64 || out.find(v) != std::string::npos) return;
    out += (out.empty() ? "" : ", ") + std::string(v);
  };
  for (size_t p = text.find("--"); p != std::string_view::npos; p = text.find("--", p + 2)) {
    size_t e = p + 2;
    while (e < text.size() && (std::isalnum(static_cast<unsigned char>(text[e])) || text[e] == '-' || text[e] == '_' ||
                               text[e] == '=' || text[e] == '.'))
      ++e;
    if (e > p + 3 && std::isalpha(static_cast<unsigned char>(text[p + 2]))) add(text.substr(p, e - p));
    p = e - 1;
  }
  for (size_t p = text.find('`'); p != std::string_view::npos;) {
    const size_t q = text.find('`', p + 1);
    if (q == std::string_view::npos) break;
    add(text.substr(p + 1, q - p - 1));
    p = text.find('`', q + 1);
  }
  return out;
}

}  // namespace

// Each event's captured error, looked up in the error table: the detail a signature names (cuda_error,
// ib_status, xid) or its whole message, with the raw line and the NCCL return chain as the context.
void Analyzer::explainGroups() {
  for (auto& g : groups_) {
    const Signature& s = catalog_.sig(g.sig);
    if (s.id.compare(0, 7, "python.") == 0 && s.when == SigWhen::kTracebackEnd && g.detail("settings").empty()) {
      const std::string named = namedSettings(g.text);
      if (!named.empty()) g.setDetail("settings", named);
    }
    if (s.explain.empty()) continue;
    std::string context = g.raw;
    for (const auto& c : g.chain) context += "\n" + c;
    for (const auto& [k, v] : g.details) context += "\n" + k + "=" + v;
    for (const auto& [kind, key] : s.explain) {
      const bool whole = key == "message";
      const std::string subject = whole ? g.text : g.detail(key);
      if (subject.empty()) continue;
      const int k = catalog_.lookup(kind, subject, context, whole);
      if (k >= 0 && k != g.sig) {
        g.knowledge = k;
        break;
      }
    }
  }
}

// A failure of the GPU, the driver or the fabric (a signature with `consequences`) explains the errors
// the processes on it print next: those become its echoes, named in the report, instead of competing
// with it as causes.
void Analyzer::tieConsequences(Result* r) {
  if (r->rootGroup < 0) return;
  const Signature& root = catalog_.sig(groups_[r->rootGroup].sig);
  if (root.consequences.empty()) return;
  const std::string title = root.title;
  for (size_t i = 0; i < groups_.size(); ++i) {
    EventGroup& g = groups_[i];
    if (static_cast<int>(i) == r->rootGroup || g.cls != SigClass::kOrigin) continue;
    const std::string& id = catalog_.sig(g.sig).id;
    bool match = false;
    for (const auto& prefix : root.consequences) match = match || id.compare(0, prefix.size(), prefix) == 0;
    if (!match) continue;
    g.cls = SigClass::kEcho;
    g.notes.push_back("a consequence of " + title);
    r->echoes.push_back(static_cast<int>(i));
    r->otherOrigins.erase(std::remove(r->otherOrigins.begin(), r->otherOrigins.end(), static_cast<int>(i)),
                          r->otherOrigins.end());
  }
}

}  // namespace triage
}  // namespace arfuse
