// The one escaping of untrusted text on its way out: log lines (an ARFUSE_* value, a rendezvous
// peer's error text), CLI errors that quote a file (a JSON key, a topology field), `arfuse doctor`
// (names any local user can create in /dev/shm, environment values) and `arfuse triage` (log lines,
// file and tar member names). Text is escaped once, where it is printed, never where it is read:
// what the program compares and stores stays the bytes it was given.
//
// Header-only so that every layer can use it without a link dependency (the triage, topology and
// rendezvous libraries are separate static libraries).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace arfuse {

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when s[i] does not start one.
// Rejects overlong forms, surrogates and code points above U+10FFFF (RFC 3629).
inline size_t utf8SequenceLength(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  const size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(k) & 0xC0) != 0x80) return 0;
  if (c == 0xE0 && b(1) < 0xA0) return 0;  // overlong
  if (c == 0xED && b(1) > 0x9F) return 0;  // surrogate
  if (c == 0xF0 && b(1) < 0x90) return 0;  // overlong
  if (c == 0xF4 && b(1) > 0x8F) return 0;  // above U+10FFFF
  return n;
}

// For a terminal or a one-line log record: control bytes (everything below 0x20 but tab, and DEL),
// C1 controls (U+0080..U+009F, which act like ESC on some terminals) and bytes that are not valid
// UTF-8 become visible "\xNN" escapes, so a string can neither forge a line (a newline followed by
// "VERDICT:" or "arfuse ERROR"), retitle or recolour the terminal, nor truncate the output at a NUL.
// Newlines are kept only when keepNewlines is set (a whole report whose own lines are trusted; its
// untrusted fields were escaped without it). Idempotent: escaping twice gives the same text.
inline std::string printable(std::string_view s, bool keepNewlines = false) {
  auto hex = [](unsigned char c, std::string* out) {
    char b[8];
    std::snprintf(b, sizeof(b), "\\x%02X", c);
    *out += b;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c == '\n' && keepNewlines) || c == '\t' || (c >= 0x20 && c < 0x7F)) {
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x80) {  // control byte or DEL
      hex(c, &out);
      ++i;
    } else if (const size_t n = utf8SequenceLength(s, i)) {
      if (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) {  // C1 control
        hex(c, &out);
        hex(static_cast<unsigned char>(s[i + 1]), &out);
      } else {
        out.append(s.data() + i, n);
      }
      i += n;
    } else {
      hex(c, &out);
      ++i;
    }
  }
  return out;
}

}  // namespace arfuse
