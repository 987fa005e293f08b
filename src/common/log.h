// The canonical log line, one grammar for every message arfuse prints:
//   arfuse LEVEL rank=R dev=D sm_XY [key=value ...] file.cc:123 message
// rank/dev are '-' when no communicator is involved. `arfuse triage` parses exactly this.
#pragma once

#include <cstdio>
#include <string>

#include "base/status.h"     // StatusTrailSink
#include "base/strprintf.h"  // strprintf, for every layer above

namespace arfuse {

enum LogLevel { kLogDebug = 0, kLogInfo = 1, kLogWarn = 2, kLogError = 3 };

struct LogContext {
  int rank = -1;
  int device = -1;
  int arch = 0;  // 90 for sm_90; 0 unknown
};

// Builds a line (without newline). `fields` is zero or more "key=value" tokens separated by spaces.
std::string formatLogLine(LogLevel level, const LogContext& ctx, const std::string& fields, const char* file, int line,
                          const std::string& message);
// Prints the line on stderr if level >= ARFUSE_LOG_LEVEL.
void logLine(LogLevel level, const LogContext& ctx, const std::string& fields, const char* file, int line,
             const std::string& message);
bool logEnabled(LogLevel level);
// The sink of Status's trail (base/status.h) this file installs at load: logLine at DEBUG.
StatusTrailSink commonStatusTrailSink();
// ARFUSE_DEBUG_FILE's pattern with %p -> pid and %h -> host name.
std::string expandDebugPath(const std::string& pattern, long pid, const std::string& host);

// Opens a log or dump file for appending as arfuse always does: created with mode 0600 (flight-recorder
// dumps and logs name hosts, pids and buffer addresses), close-on-exec, and never through a symbolic
// link (O_NOFOLLOW: a link planted at a predictable /tmp path cannot redirect arfuse's writes into
// another file of this user). *out is nullptr on failure ("cannot open PATH: why").
Status openPrivateAppend(const std::string& path, FILE** out);

}  // namespace arfuse

#define ARFUSE_LOG(level, ctx, fields, ...) \
  ::arfuse::logLine(level, ctx, fields, __FILE__, __LINE__, ::arfuse::strprintf(__VA_ARGS__))
