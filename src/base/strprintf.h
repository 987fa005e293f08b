// printf into a std::string: the one formatter of messages, header-only so that every layer (the
// rendezvous, triage and topology libraries included, through base/status.h's ARFUSE_FAIL) formats
// without a link dependency. common/log.h offers it to the layers above.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

namespace arfuse {

inline std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string strprintf(const char* fmt, ...) {
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

}  // namespace arfuse
