// Python tracebacks and faulthandler dumps, read line by line per process stream.
//
// What real logs do to a traceback, and how each is handled here:
//  - its lines carry a logger prefix (vLLM "ERROR 04-17 ... [engine.py:448] ", "[rank0]: ") or none;
//    the stream key (rank / process) keeps ranks apart when they interleave;
//  - the indentation is lost (cloud-logging exports, some pastes): a frame is recognised by
//    'File "...", line N' wherever it starts, a source line by following a frame, and the end by a
//    line that reads like an exception, not by its column;
//  - the exception line comes without a header (only "KeyError: ..." was printed or pasted): it is
//    taken on its own when it reads like one (bareException);
//  - the traceback is cut off (the process was killed, the paste or the log ends) inside a frame:
//    the innermost frame is matched against the catalogue's `when = frame` signatures (a fused
//    all-reduce, a JIT build) and reported as cut, naming the function, instead of "no error line";
//  - chained exceptions: a generic wrapper re-raising the exception above it is an echo of it.
#include <algorithm>

#include "analyzer.h"
#include "analyzer_state.h"
#include "text.h"

namespace arfuse {
namespace triage {

namespace {

bool identChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool exceptionName(std::string_view last) {
  for (const char* suf : {"Error", "Exception", "Exit", "Interrupt", "Failure", "Fault", "Timeout", "Abort"})
    if (endsWith(last, suf)) return true;
  return last == "StopIteration" || last == "CancelledError";
}

// '^' / '~' markers under a source line (Python 3.11+).
bool markerLine(std::string_view t) { return !t.empty() && t.find_first_not_of("^~ ") == std::string_view::npos; }

// "  File \"/x/y.py\", line 12, in f" -> "f"
std::string_view frameFunction(std::string_view frame) {
  size_t in = frame.rfind(", in ");
  return in == std::string_view::npos ? std::string_view() : frame.substr(in + 5);
}

}  // namespace

bool looksLikeException(std::string_view t, bool strict) {
  size_t i = 0;
  std::string_view last;
  for (;;) {  // a dotted name: torch.distributed.DistBackendError
    size_t b = i;
    if (i >= t.size() || !(identChar(t[i]) && !(t[i] >= '0' && t[i] <= '9'))) return false;
    while (i < t.size() && identChar(t[i])) ++i;
    last = t.substr(b, i - b);
    if (i < t.size() && t[i] == '.' && i + 1 < t.size() && identChar(t[i + 1])) {
      ++i;
      continue;
    }
    break;
  }
  if (i < t.size() && t[i] == '(') {  // ray.exceptions.RayTaskError(RuntimeError): ...
    size_t close = t.find(')', i);
    if (close == std::string_view::npos || close - i > 80) return false;
    i = close + 1;
  }
  const bool named = exceptionName(last);
  if (i == t.size()) return named;  // bare "AssertionError"
  if (t[i] != ':') return false;
  const bool message = i + 1 < t.size() && t[i + 1] == ' ';
  if (i + 1 < t.size() && !message) return false;  // "http://..." or "a:b"
  if (!strict) return named || (last[0] >= 'A' && last[0] <= 'Z');
  return named && message && !endsWith(last, "Warning");
}

bool isLibraryFrame(std::string_view frame) {
  for (const char* dir : {"site-packages/", "dist-packages/", "/lib/python", "<frozen ", "/bin/", "\\lib\\", "<string>",
                          "uvloop/", ".pyx\""})
    if (frame.find(dir) != std::string_view::npos) return true;
  return false;
}

bool isSourceLine(bool afterFrame, std::string_view body) {
  std::string_view t = trimLeft(body);
  if (t.empty() || startsWith(t, "File \"") || markerLine(t) || looksLikeException(t, false)) return false;
  return t.size() != body.size() || afterFrame;
}

int Analyzer::tracebackLine(Stream* st, const std::string& key, const LineInfo& info, std::string_view raw,
                            const Occurrence& occ, uint32_t extra, int g) {
  FileState& fs = *fs_;
  std::string_view t = trimLeft(info.body);
  int result = -2;  // not part of a traceback
  const bool indented = t.size() != info.body.size();

  if (st->lastErrorPending) {  // the line after NCCL's "Last error:" says why
    st->lastErrorPending = false;
    if (g < 0 && !t.empty()) {
      const int sig = catalog_.find("nccl.last_error");
      if (sig >= 0) g = addEvent(sig, catalog_.sig(sig).cls, info, raw, occ, {});
    }
    if (g >= 0) result = g;
  }
  if ((extra & kLastError) && t.find("Last error:") != std::string_view::npos) {
    st->lastErrorPending = true;
    st->rank = occ.rank;
    st->rankInferred = occ.rankInferred;
    st->proc = occ.proc;
    fs.active = key;
    result = -1;
  }

  if (extra & kTraceback) {
    if (st->state == Stream::kFrames) cutTraceback(st);  // a new traceback starts before the last one ended
    // An error line right above the traceback only announces it ("Error in inspecting model ...",
    // "Exception in worker ..."): the exception the traceback ends with says what failed.
    if (fs.floorGroup >= 0 && fs.floorLine + 1 == fs.lineNo && fs.floorKey == key && fs.floorAnnounces &&
        groups_[fs.floorGroup].cls == SigClass::kOrigin && groups_[fs.floorGroup].count == 1) {
      groups_[fs.floorGroup].cls = SigClass::kEcho;
      groups_[fs.floorGroup].notes.push_back("announces the traceback below it");
    }
    st->userFrame.clear();
    st->wrapper = st->chainPending && st->lastExc >= 0;
    st->chainPending = false;
    st->state = Stream::kFrames;
    st->lastFrame.clear();
    st->lastCode.clear();
    st->codeSig = -1;
    st->frames = 0;
    st->prevWasFrame = false;
    st->rank = occ.rank;
    st->rankInferred = occ.rankInferred;
    st->proc = occ.proc;
    fs.active = key;
    // "Scheduler hit an exception: Traceback (most recent call last):" -- nothing more on the line.
    return g >= 0 ? g : -1;
  }

  // Frames pasted without their "Traceback (most recent call last):" header start one too.
  if (st->state != Stream::kFrames && (extra & kFrameLine) && st->faultState == 0 && startsWith(t, "File \"") &&
      t.find("\", line ") != std::string_view::npos) {
    st->wrapper = false;
    st->chainPending = false;
    st->state = Stream::kFrames;
    st->frames = 0;
    st->codeSig = -1;
    st->rank = occ.rank;
    st->rankInferred = occ.rankInferred;
    st->proc = occ.proc;
    st->userFrame.clear();
    fs.active = key;
  }

  bool excLine = false;
  if (st->state == Stream::kFrames) {
    result = -1;
    if (startsWith(t, "File \"")) {
      if (st->userFrame.empty() && !isLibraryFrame(t)) st->userFrame = clip(t, 240);
      st->lastFrame = clip(t, 240);
      st->lastCode.clear();
      st->codeSig = -1;
      st->frameOcc = occ;
      ++st->frames;
      st->prevWasFrame = true;
    } else if (t.empty() || markerLine(t)) {
      // blank lines and ^^^^ markers belong to the traceback
    } else if (looksLikeException(t, false)) {
      excLine = true;
    } else if (indented || st->prevWasFrame) {
      if (st->lastCode.empty()) st->lastCode = clip(t, 240);  // the source line of the innermost frame
      st->prevWasFrame = false;
    } else {
      cutTraceback(st);  // an ordinary line: the traceback ended without its exception line
      result = -2;
    }
  } else if (st->state == Stream::kAfterExc) {
    if (extra & (kChainDirect | kChainDuring)) {
      st->chainPending = true;
      result = -1;
    } else if (!info.body.empty() && ++st->afterLines > 6) {
      st->state = Stream::kIdle;
    }
  }

  // faulthandler: "Fatal Python error: ...", "Current thread 0x... (most recent call first):", frames.
  if (extra & kFatalPython) {
    st->faultState = 1;
    st->rank = occ.rank;
    st->rankInferred = occ.rankInferred;
    st->proc = occ.proc;
    fs.active = key;
    if (g >= 0) st->fatalGroup = g;
  } else if (st->faultState == 1 && (extra & kFaultThread)) {
    if (t.find("Current thread") != std::string_view::npos) st->faultState = 2;
  } else if (st->faultState == 2 && startsWith(t, "File \"")) {
    if (st->fatalGroup >= 0 && groups_[st->fatalGroup].detail("crashed_at").empty())
      groups_[st->fatalGroup].setDetail("crashed_at", clip(t, 200));
    st->faultState = 3;
  } else if (st->faultState >= 1 && !indented && !(extra & kFaultThread) && !info.body.empty() &&
             !startsWith(info.body, "Extension modules") && !startsWith(info.body, "Python runtime state")) {
    st->faultState = 0;
  }

  if (excLine) {
    if (g < 0) {
      SigMatch bm;
      if (matcher_->matchKind(SigWhen::kTracebackEnd, t, &bm))
        g = addEvent(bm.sig, catalog_.sig(bm.sig).cls, info, raw, occ, bm.details);
    }
    st->state = Stream::kAfterExc;
    st->afterLines = 0;
    if (g >= 0) {
      EventGroup& e = groups_[g];
      e.inTraceback = true;
      if (!st->lastFrame.empty() && e.detail("raised_at").empty()) e.setDetail("raised_at", st->lastFrame);
      if (!st->userFrame.empty() && st->userFrame != st->lastFrame && e.detail("user_frame").empty())
        e.setDetail("user_frame", st->userFrame);
      // A bare "AssertionError": the assert statement printed under the innermost frame is its message.
      if (e.count == 1 && e.text == "AssertionError" && startsWith(st->lastCode, "assert ")) {
        e.text += ": " + st->lastCode;
        SigMatch am;  // matched again with its message
        if (catalog_.sig(e.sig).when == SigWhen::kTracebackEnd &&
            matcher_->matchKind(SigWhen::kTracebackEnd, e.text, &am) &&
            catalog_.sig(am.sig).weight > catalog_.sig(e.sig).weight) {
          e.sig = am.sig;
          e.cls = catalog_.sig(am.sig).cls;
        }
      }
      startContinuation(g, key, info);
      if (st->wrapper && st->lastExc >= 0 && st->lastExc != g) {
        EventGroup& cause = groups_[st->lastExc];
        const Signature& ws = catalog_.sig(e.sig);
        if (ws.when == SigWhen::kTracebackEnd && e.cls == SigClass::kOrigin) {
          e.cls = SigClass::kEcho;
          if (e.notes.empty()) e.notes.push_back("re-raises the exception above it: " + clip(cause.text, 160));
        }
      }
      st->lastExc = g;
      result = g;
    }
    st->wrapper = false;
  }
  if (st->state == Stream::kIdle && st->faultState == 0 && !st->lastErrorPending && fs.active == key) fs.active.clear();
  return result;
}

void Analyzer::cutTraceback(Stream* st) {
  st->state = Stream::kIdle;
  if (st->frames == 0 || st->lastFrame.empty()) return;
  const std::string subject = st->lastFrame + " | " + st->lastCode;
  SigMatch m;
  int sig = -1;
  if (st->codeSig >= 0) {  // the source line itself says what failed ('raise RuntimeError("FlashInfer requires")
    sig = st->codeSig;
    m.details = st->codeDetails;
  } else if (matcher_->matchKind(SigWhen::kFrame, subject, &m)) {
    sig = m.sig;
  } else {
    sig = catalog_.find("python.traceback_cut");
  }
  st->codeSig = -1;
  if (sig < 0) return;
  std::string_view fn = frameFunction(st->lastFrame);
  LineInfo info;
  const std::string text = "traceback cut off in " + (fn.empty() ? std::string("?") : std::string(fn)) +
                           "(): " + (st->lastCode.empty() ? st->lastFrame : st->lastCode);
  info.body = text;
  std::vector<std::pair<std::string, std::string>> details = m.details;
  details.emplace_back("raised_at", st->lastFrame);
  details.emplace_back("cut_in", std::string(fn.substr(0, 120)));
  const int g = addEvent(sig, catalog_.sig(sig).cls, info, text, st->frameOcc, details);
  if (g >= 0 && groups_[g].notes.empty())
    groups_[g].notes.push_back(
        "the traceback ends inside this frame without its exception line: the process was "
        "killed, or the log (or its paste) was cut; the message is missing");
  st->frames = 0;
  st->lastFrame.clear();
  st->lastCode.clear();
}

int Analyzer::bareException(const LineInfo& info, std::string_view raw, const Occurrence& occ) {
  std::string_view t = trimLeft(info.body);
  if (!looksLikeException(t, true)) return -1;
  SigMatch bm;
  if (!matcher_->matchKind(SigWhen::kTracebackEnd, t, &bm)) return -1;
  const int g = addEvent(bm.sig, catalog_.sig(bm.sig).cls, info, raw, occ, bm.details);
  if (g >= 0 && groups_[g].notes.empty())
    groups_[g].notes.push_back(
        "an exception line without its traceback (none was printed above it, or it came "
        "in another order, as cloud-logging exports do)");
  return g;
}

}  // namespace triage
}  // namespace arfuse
