#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "base/printable.h"
#include "base/status.h"
#include "common/params.h"

namespace arfuse {

std::string formatLogLine(LogLevel level, const LogContext& ctx, const std::string& fields, const char* file, int line,
                          const std::string& message) {
  static const char* names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  const char* base = file ? std::strrchr(file, '/') : nullptr;
  base = base ? base + 1 : (file ? file : "?");
  std::string s = "arfuse ";
  s += names[level];
  s += ctx.rank >= 0 ? strprintf(" rank=%d", ctx.rank) : std::string(" rank=-");
  s += ctx.device >= 0 ? strprintf(" dev=%d", ctx.device) : std::string(" dev=-");
  if (ctx.arch > 0) s += strprintf(" sm_%d", ctx.arch);
  if (!fields.empty()) s += " " + fields;
  s += strprintf(" %s:%d ", base, line);
  s += message;
  // One record per line whatever the message quotes (an ARFUSE_* value, a file's key, a peer's
  // text): escaped here, where it is printed (base/printable.h).
  return printable(s);
}

bool logEnabled(LogLevel level) {
  const int min = paramLogLevel();
  return min >= 0 ? static_cast<int>(level) >= min : level >= kLogWarn;
}

namespace {

// Each frame a failure passes through (base/status.h, which cannot log: it sits below this layer):
// `file:line -> code` at DEBUG, NCCLCHECK's free backtrace.
void statusTrailLine(const char* file, int line, arfuseResult_t code) {
  if (logEnabled(kLogDebug))
    logLine(kLogDebug, LogContext{}, "", file, line, strprintf("-> %s", arfuseGetErrorName(code)));
}

// Installed when the library (or a program linking this layer) loads: every logLine user links
// this file, and so does everything that raises a Status above base.
[[maybe_unused]] const bool kStatusTrailInstalled = (setStatusTrailSink(statusTrailLine), true);

}  // namespace

StatusTrailSink commonStatusTrailSink() { return statusTrailLine; }

std::string expandDebugPath(const std::string& pattern, long pid, const std::string& host) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && (pattern[i + 1] == 'p' || pattern[i + 1] == 'h')) {
      out += pattern[i + 1] == 'p' ? std::to_string(pid) : host;
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

Status openPrivateAppend(const std::string& path, FILE** out) {
  *out = nullptr;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
  if (fd < 0) {
    const int e = errno;
    return ARFUSE_FAIL(
        arfuseSystemError, "cannot open %s: %s%s", path.c_str(), std::strerror(e),
        e == ELOOP ? " (it is a symbolic link; arfuse does not write through links: give the real path)" : "");
  }
  *out = ::fdopen(fd, "a");
  if (!*out) {
    const int e = errno;
    ::close(fd);
    return ARFUSE_FAIL(arfuseSystemError, "cannot open %s: %s", path.c_str(), std::strerror(e));
  }
  return Status();
}

namespace {

// The ARFUSE_DEBUG_FILE stream, opened on first use (nullptr when unset or unopenable; the failure
// to open is reported once on stderr).
FILE* debugFile() {
  static FILE* f = [] {
    const std::string pattern = paramDebugFile();
    if (pattern.empty()) return static_cast<FILE*>(nullptr);
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    const std::string path = expandDebugPath(pattern, static_cast<long>(getpid()), host);
    FILE* out = nullptr;
    const Status opened = openPrivateAppend(path, &out);
    if (!opened.ok())
      std::fprintf(stderr, "%s\n",
                   formatLogLine(kLogWarn, LogContext{}, "", __FILE__, __LINE__,
                                 "ARFUSE_DEBUG_FILE=" + pattern + ": " + opened.message())
                       .c_str());
    return out;
  }();
  return f;
}

}  // namespace

void logLine(LogLevel level, const LogContext& ctx, const std::string& fields, const char* file, int line,
             const std::string& message) {
  if (!logEnabled(level)) return;
  static std::mutex mu;
  const std::string s = formatLogLine(level, ctx, fields, file, line, message);
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "%s\n", s.c_str());
  std::fflush(stderr);
  if (FILE* f = debugFile()) {
    std::fprintf(f, "%s\n", s.c_str());
    std::fflush(f);
  }
}

}  // namespace arfuse
