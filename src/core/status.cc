#include "core/status.h"

#include <cstring>

namespace arfuse {

Status& Status::through(const char* file, int line) {
  const char* slash = std::strrchr(file, '/');
  const std::string here = strprintf("%s:%d", slash ? slash + 1 : file, line);
  if (trail_.empty()) {
    file_ = file;
    line_ = line;
  }
  trail_ = trail_.empty() ? here : trail_ + " <- " + here;
  if (logEnabled(kLogDebug))
    logLine(kLogDebug, LogContext{}, "", file, line, strprintf("-> %s", arfuseGetErrorName(code_)));
  return *this;
}

arfuseResult_t Status::into(std::string* message) const {
  if (!ok() && message) *message = message_;
  return code_;
}

}  // namespace arfuse
