#include "text.h"

#include <cstdio>

namespace arfuse {
namespace triage {

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when s[i] does not start one.
// Rejects overlong forms, surrogates and code points above U+10FFFF (RFC 3629).
size_t utf8Len(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(k) & 0xC0) != 0x80) return 0;
  if (c == 0xE0 && b(1) < 0xA0) return 0;  // overlong
  if (c == 0xED && b(1) > 0x9F) return 0;  // surrogate
  if (c == 0xF0 && b(1) < 0x90) return 0;  // overlong
  if (c == 0xF4 && b(1) > 0x8F) return 0;  // above U+10FFFF
  return n;
}

void hexEscape(unsigned char c, std::string* out) {
  char b[8];
  std::snprintf(b, sizeof(b), "\\x%02X", c);
  *out += b;
}

}  // namespace

std::string printable(std::string_view s, bool keepNewlines) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n' && keepNewlines) {
      out += '\n';
      ++i;
    } else if (c == '\t' || (c >= 0x20 && c < 0x7F)) {
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x80) {  // control byte or DEL
      hexEscape(c, &out);
      ++i;
    } else if (size_t n = utf8Len(s, i)) {
      // C1 controls (U+0080..U+009F, encoded C2 80..C2 9F) act like ESC on some terminals.
      if (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) {
        hexEscape(c, &out);
        hexEscape(static_cast<unsigned char>(s[i + 1]), &out);
      } else {
        out.append(s.data() + i, n);
      }
      i += n;
    } else {
      hexEscape(c, &out);
      ++i;
    }
  }
  return out;
}

std::string jsonString(std::string_view s) {
  std::string o = "\"";
  o.reserve(s.size() + 2);
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      if (size_t n = utf8Len(s, i)) {
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
