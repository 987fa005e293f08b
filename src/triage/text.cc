#include "text.h"

#include <cstdio>

#include "base/printable.h"

namespace arfuse {
namespace triage {

// printable() is the project's one escaping of untrusted output (base/printable.h).
std::string printable(std::string_view s, bool keepNewlines) { return arfuse::printable(s, keepNewlines); }

std::string jsonString(std::string_view s) {
  std::string o = "\"";
  o.reserve(s.size() + 2);
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      if (size_t n = utf8SequenceLength(s, i)) {
        o.append(s.data() + i, n);
        i += n;
      } else {
        o += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
        ++i;
      }
      continue;
    }
    switch (c) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      case '\t':
        o += "\\t";
        break;
      case '\r':
        o += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", c);
          o += b;
        } else {
          o += static_cast<char>(c);
        }
    }
    ++i;
  }
  return o + "\"";
}

std::string clip(std::string_view s, size_t n) {
  if (s.size() <= n) return std::string(s);
  size_t cut = n > 3 ? n - 3 : 0;
  // Step back over UTF-8 continuation bytes so the cut falls between characters.
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return std::string(s.substr(0, cut)) + "...";
}

}  // namespace triage
}  // namespace arfuse
