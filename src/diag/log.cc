#include "diag/log.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "common/params.h"

namespace arfuse {

std::string strprintf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char buf[1024];
  const int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < static_cast<int>(sizeof buf)) return std::string(buf, n < 0 ? 0 : n);
  std::string s(n + 1, '\0');
  va_start(ap, fmt);
  vsnprintf(&s[0], s.size(), fmt, ap);
  va_end(ap);
  s.resize(n);
  return s;
}

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
  return s;
}

bool logEnabled(LogLevel level) {
  const int min = paramLogLevel();
  return min >= 0 ? static_cast<int>(level) >= min : level >= kLogWarn;
}

void logLine(LogLevel level, const LogContext& ctx, const std::string& fields, const char* file, int line,
             const std::string& message) {
  if (!logEnabled(level)) return;
  static std::mutex mu;
  const std::string s = formatLogLine(level, ctx, fields, file, line, message);
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "%s\n", s.c_str());
  std::fflush(stderr);
}

}  // namespace arfuse
