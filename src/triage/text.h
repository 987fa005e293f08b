// Text that leaves triage: log bytes are untrusted, so nothing reaches a terminal or a JSON reader
// without passing through one of these.
#pragma once

#include <string>
#include <string_view>

namespace arfuse {
namespace triage {

// For a terminal: control bytes (ESC, NUL, BEL, ... everything below 0x20 but tab, and DEL) and
// bytes that are not valid UTF-8 become visible "\xNN" escapes, so an OSC sequence or a NUL in a
// log line can neither retitle the terminal nor truncate the report. Newlines are kept when
// keepNewlines is set (a whole report), escaped otherwise (one field).
std::string printable(std::string_view s, bool keepNewlines = false);

// A JSON string literal (with quotes): valid UTF-8 always; an invalid byte becomes U+FFFD.
std::string jsonString(std::string_view s);

// Cuts s to at most n bytes without splitting a UTF-8 sequence; appends "..." when it cut.
std::string clip(std::string_view s, size_t n);

}  // namespace triage
}  // namespace arfuse
