// A small JSON reader and writer helpers, internal to arfuse_topo.
//
// Hand-written because the library takes no third-party dependency for a file format this small,
// and because the topology reader must name the line and column of every problem, which needs the
// position of each value kept alongside it. Numbers keep their source text so integer fields can
// reject "8.0" and "1e3" instead of silently converting them.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace arfuse {
namespace topo {
namespace json {

struct Pos {
  int line = 1;
  int col = 1;
};

struct Member;

struct Value {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  Pos pos;
  bool boolean = false;
  std::string text;  // string contents (unescaped), or the number exactly as written
  std::vector<Value> items;
  std::vector<Member> members;  // in source order; duplicate keys are rejected by the parser
};

struct Member {
  std::string key;
  Pos keyPos;
  Value value;
};

const char* kindName(Value::Kind k);

// Bounds on what arfuse reads (topologies, calibrations, bench output): far above any file arfuse
// writes, low enough that a hostile or broken file costs milliseconds and megabytes, not minutes and
// gigabytes.
constexpr size_t kMaxFileBytes = size_t{16} << 20;
constexpr size_t kMaxValues = size_t{1} << 20;

// Parses one JSON document (RFC 8259; nesting limited to 64 levels, at most kMaxValues values). A
// failure is arfuseInvalidArgument with the message "L:C: message".
Status parse(std::string_view text, Value* out);

// Reads a whole file for parse(): a regular file of at most maxBytes. A FIFO, a device (/dev/zero),
// a directory or a socket is refused by name instead of blocking or reading forever (it is opened
// non-blocking, so even a FIFO without a writer cannot hang the open). The message is "PATH: why":
// arfuseSystemError when the file cannot be opened or read, arfuseInvalidArgument when the path
// names something else than a JSON file arfuse reads (not a regular file, over maxBytes).
Status readFile(const std::string& path, std::string* text, size_t maxBytes = kMaxFileBytes);

// Appends s as a JSON string literal: quotes, backslash and control characters escaped; other bytes
// (UTF-8) are written as they are.
void appendString(std::string* out, std::string_view s);
// Shortest text that reads back as exactly v ("52.3", "2.6", "1e-07"); v must be finite.
std::string formatDouble(double v);

}  // namespace json
}  // namespace topo
}  // namespace arfuse
