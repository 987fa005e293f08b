// Streaming line input: a file or stdin, plain, gzip or xz (detected by magic bytes, not by name).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace arfuse {
namespace triage {

class ByteSource;  // raw or decompressing byte stream (input.cc)

class LineReader {
 public:
  ~LineReader();
  // path "-" reads stdin. Returns nullptr and sets *error when the file cannot be opened or uses
  // a compression this build cannot read.
  static std::unique_ptr<LineReader> open(const std::string& path, std::string* error);

  // Next line without its '\n' / "\r\n", with ANSI colour escapes removed. Lines longer than
  // kMaxLine are cut (the rest is skipped). The view stays valid until the next call.
  bool next(std::string_view* line);

  const char* compression() const;                     // "none", "gzip", "xz"
  uint64_t bytes() const { return bytes_; }            // decompressed bytes consumed
  const std::string& error() const { return error_; }  // set when reading failed mid-stream

  static constexpr size_t kMaxLine = 64 * 1024;

 private:
  LineReader() = default;
  bool fill();

  std::unique_ptr<ByteSource> src_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  bool skipping_ = false;  // inside the tail of an over-long line
  uint64_t bytes_ = 0;
  std::string scratch_;
  std::string error_;
};

}  // namespace triage
}  // namespace arfuse
