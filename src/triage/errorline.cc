#include "errorline.h"

#include <cctype>
#include <cstring>
#include <string>

namespace arfuse {
namespace triage {

namespace {

bool ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Case-insensitive prefix test against a lowercase word.
bool istarts(std::string_view s, size_t at, const char* lowerWord) {
  const size_t n = std::strlen(lowerWord);
  if (at + n > s.size()) return false;
  for (size_t i = 0; i < n; ++i)
    if (std::tolower(static_cast<unsigned char>(s[at + i])) != lowerWord[i]) return false;
  return true;
}

enum Level { kNone, kInfo, kWarn, kError };

// A level word as a whole token: "E", "ERROR", "Error", "FATAL", "W", "WARNING", "I", "INFO", ...
Level levelWord(std::string_view w) {
  std::string l;
  for (char c : w.substr(0, 12)) l.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (w.size() > 12) return kNone;
  if (l == "e" || l == "error" || l == "err" || l == "erro" || l == "f" || l == "fatal" || l == "critical" ||
      l == "crit" || l == "emerg" || l == "alert" || l == "panic")
    return kError;
  if (l == "w" || l == "warn" || l == "warning") return kWarn;
  if (l == "i" || l == "info" || l == "d" || l == "debug" || l == "v" || l == "verbose" || l == "trace" ||
      l == "notice")
    return kInfo;
  return kNone;
}

// key=value / "key":"value" level fields of structured logs (logfmt, JSON lines, k8s components).
Level structuredLevel(const std::string& lower) {
  for (const char* key : {"level=", "lvl=", "severity=", "\"level\":\"", "\"severity\":\"", "\"level\": \""}) {
    const size_t p = lower.find(key);
    if (p == std::string::npos) continue;
    size_t b = p + std::strlen(key), e = b;
    if (e < lower.size() && lower[e] == '"') b = ++e;
    while (e < lower.size() && std::isalpha(static_cast<unsigned char>(lower[e]))) ++e;
    const Level l = levelWord(std::string_view(lower).substr(b, e - b));
    if (l != kNone) return l;
  }
  // "2024-01-22 14:32:27 | ERROR | stderr | msg", loguru's "| ERROR    | module:fn:12 - msg"
  for (size_t p = lower.find("| "); p != std::string::npos && p < 64; p = lower.find("| ", p + 2)) {
    size_t b = p + 2, e = b;
    while (e < lower.size() && std::isalpha(static_cast<unsigned char>(lower[e]))) ++e;
    size_t s = e;
    while (s < lower.size() && lower[s] == ' ') ++s;
    if (s < lower.size() && lower[s] == '|') {
      const Level l = levelWord(std::string_view(lower).substr(b, e - b));
      if (l != kNone) return l;
    }
  }
  return kNone;
}

bool anyOf(const std::string& lower, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (lower.find(w) != std::string::npos) return true;
  return false;
}

}  // namespace

size_t findExceptionName(std::string_view b) {
  for (const char* suffix : {"Error", "Exception", "Failure", "Fault"}) {
    for (size_t p = b.find(suffix); p != std::string_view::npos; p = b.find(suffix, p + 1)) {
      size_t e = p + std::strlen(suffix);
      while (e < b.size() && ident(b[e])) ++e;  // hipErrorNoBinaryForGpu, cudaErrorIllegalAddress
      size_t after = e;
      if (after < b.size() && b[after] == '(') {  // ray.exceptions.RayTaskError(RuntimeError): ...
        const size_t close = b.find(')', after);
        if (close == std::string_view::npos || close - after > 80) continue;
        after = close + 1;
      }
      if (!(after == b.size() || (b[after] == ':' && (after + 1 == b.size() || b[after + 1] == ' ')))) continue;
      size_t s = p;  // back over the identifier, dots and "::" (torch.distributed.DistBackendError)
      while (s > 0 && (ident(b[s - 1]) || b[s - 1] == '.' || (b[s - 1] == ':' && s > 1 && b[s - 2] == ':') ||
                       (b[s - 1] == ':' && s < b.size() && b[s] == ':')))
        --s;
      if (s < b.size() && !(std::isalpha(static_cast<unsigned char>(b[s])) || b[s] == '_')) continue;
      const std::string_view name = b.substr(s, e - s);
      if (name.find("Warning") != std::string_view::npos) continue;
      if (s == 0 || b[s - 1] == ' ' || b[s - 1] == '(' || b[s - 1] == '\'' || b[s - 1] == '"' || b[s - 1] == '[' ||
          b[s - 1] == '\t' || b[s - 1] == '=' || b[s - 1] == ':')
        return s;
    }
  }
  return std::string_view::npos;
}

ErrorLine classifyErrorLine(std::string_view body, char level) {
  ErrorLine r;
  if (level == 'I' || level == 'D') return r;
  size_t i = 0;
  while (i < body.size() && (body[i] == ' ' || body[i] == '\t')) ++i;
  const std::string lower = [&] {
    std::string l(body.substr(i, 1024));
    for (char& c : l)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    return l;
  }();
  Level lv = level == 'E' || level == 'F' ? kError : level == 'W' ? kWarn : kNone;
  // Leading bracketed tags: "[TensorRT-LLM][ERROR] ...", "[TRT] [E] ...", "[02/20/2024-10:56:21] [E] ...".
  size_t at = 0;
  for (int n = 0; n < 4 && at < lower.size() && lower[at] == '['; ++n) {
    const size_t close = lower.find(']', at);
    if (close == std::string::npos || close - at > 40) break;
    const Level t = levelWord(std::string_view(lower).substr(at + 1, close - at - 1));
    if (t != kNone) lv = t;
    at = close + 1;
    while (at < lower.size() && lower[at] == ' ') ++at;
  }
  // A level word opening the message: "ERROR: ...", "Error: ...", "FATAL ...", "ERRO[0000] ...", "panic: ..."
  {
    size_t e = at;
    while (e < lower.size() && std::isalpha(static_cast<unsigned char>(lower[e]))) ++e;
    if (e > at && e < lower.size() && (lower[e] == ':' || lower[e] == '[' || (lower[e] == ' ' && e - at >= 4))) {
      const Level t = levelWord(std::string_view(lower).substr(at, e - at));
      if (t != kNone && (lower[e] != ' ' || std::isupper(static_cast<unsigned char>(body[i + at + 1])))) {
        lv = t;             // "ERROR something" (upper case) is a level; "Error in ..." is a phrase, read below
        if (t != kError) {  // the message after "WARNING: " is read for failure phrases
          at = e + 1;
          while (at < lower.size() && lower[at] == ' ') ++at;
        }
      }
    }
  }
  if (lv == kNone) lv = structuredLevel(lower);
  if (lv == kInfo) return r;
  r.warning = lv == kWarn;
  if (lv == kError) r.strength = 3;

  r.exceptionAt = findExceptionName(body);
  if (r.exceptionAt != std::string_view::npos) r.strength = std::max(r.strength, 2);
  // A tool's own error word: "nvidia-container-cli: requirement error: ...", "docker: Error response from
  // daemon: ...", "foo.c:12: error: ...".
  if (r.strength < 2 && (anyOf(lower, {" error: ", ": error ", ": error:", "error response"}) ||
                         (lower.compare(at, 6, "error ") == 0) || lower.compare(at, 6, "error:") == 0))
    r.strength = 2;
  if (r.strength < 1) {
    static const char* kStart[] = {"failed",        "failure",      "unable to",         "could not",     "cannot ",
                                   "can't ",        "assert",       "aborted",           "segmentation",  "killed",
                                   "fatal",         "no such file", "permission denied", "out of memory", "unsupported",
                                   "not supported", "incompatible"};
    for (const char* w : kStart)
      if (lower.compare(at, std::strlen(w), w) == 0) r.strength = 1;
    if (r.strength < 1 && anyOf(lower, {"guarantee(", "assertion failed", "assertion `", " failed: ", " failed with ",
                                        "core dumped", "is not supported", "not compatible", "incompatible with",
                                        "unsatisfied condition", "segmentation fault", " failed."}))
      r.strength = 1;
    if (r.strength < 1) {  // "exited with code 137", "exit code: 1", "exit status 2" (not 0)
      for (const char* w : {"exited with code ", "exit code ", "exit code: ", "exit status "}) {
        const size_t p = lower.find(w);
        if (p != std::string::npos && p + std::strlen(w) < lower.size()) {
          const char c = lower[p + std::strlen(w)];
          if (c >= '1' && c <= '9') r.strength = 1;
        }
      }
    }
  }
  if (r.strength == 0 && !r.warning) return r;
  if (r.strength == 0) return ErrorLine();  // a warning with no failure in it
  r.echoLike = anyOf(lower, {"see above", "see the above", "see stack trace", "see the stack trace",
                             "stack trace below", "root cause", "died", "shutting down", "terminating", "killing",
                             "for details", "traceback below", "see the log", "see logs", "waiting for"});
  return r;
}

}  // namespace triage
}  // namespace arfuse
