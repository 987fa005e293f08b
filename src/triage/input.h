// Streaming input: what a user hands to `arfuse triage` - files, stdin, directories of per-rank logs,
// tar archives - read one log at a time as lines, whatever its compression (gzip, xz, detected by
// content, not by name). Every stage is bounded: one log is open at a time, a line is scanned in
// fixed windows however long it is, xz decoding has a memory limit, binary data is skipped.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace arfuse {
namespace triage {

// A byte stream: read() returns the bytes produced, 0 at the end, -1 on error (message in err).
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual long read(char* dst, size_t n) = 0;
  std::string err;
};

// Memory an xz stream may use to decode (the dictionary size in its header decides; xz -9 needs
// 65 MiB). A crafted 458 KB header can otherwise ask for gigabytes.
constexpr uint64_t kXzMemLimit = 128ull << 20;

// Lines of one log. A segment ends at '\n', "\r\n" or a lone '\r' (progress bars redraw with '\r':
// an error printed after one is its own segment). A segment longer than kWindow is delivered in
// windows of kWindow bytes that overlap by kOverlap, so a message straddling a window edge is still
// seen whole; nothing is cut silently. ANSI colour (CSI) and OSC title sequences are removed,
// including syslog's "#033[" spelling of ESC.
class LineReader {
 public:
  explicit LineReader(std::unique_ptr<ByteSource> src);
  ~LineReader();

  // Next segment; *sameLine is true when it continues the line of the previous segment (after a
  // '\r' or a window edge), so line numbers count '\n' as editors do. The view stays valid until
  // the next call.
  bool next(std::string_view* segment, bool* sameLine);

  uint64_t bytes() const { return bytes_; }             // decoded bytes consumed
  uint64_t windowedLines() const { return windowed_; }  // lines longer than kWindow
  const std::string& error() const { return error_; }   // set when reading failed mid-stream

  static constexpr size_t kWindow = 64 * 1024;
  static constexpr size_t kOverlap = 1024;

 private:
  bool fill();
  std::string_view clean(std::string_view v);

  // The first c in buf_[from, limit), via the scan cache *at (see next()); limit if none.
  size_t find(char c, size_t from, size_t limit, size_t* at);

  std::unique_ptr<ByteSource> src_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;
  // Where the last search for '\n' (for '\r') stopped in buf_: the terminator's index, or the end of
  // the bytes searched (none before it). Every byte is searched for each terminator at most once, so
  // a stream of one-byte segments (a '\r' every byte) costs O(1) per segment, not a 64 KiB scan.
  size_t nlAt_ = 0, crAt_ = 0;
  bool eof_ = false;
  bool inWindows_ = false;  // the current line is being delivered window by window
  bool pendingSameLine_ = false;
  uint64_t bytes_ = 0, windowed_ = 0;
  std::string scratch_;
  std::string error_;
};

// One log ready to read.
struct LogInput {
  std::string name;         // path, "<stdin>", or "archive.tar.gz:member/path"
  std::string compression;  // "none", "gzip", "xz" (of the log itself, or of its archive)
  std::unique_ptr<LineReader> reader;
};

class TarCursor;  // archive.cc

// The inputs of one run. add() checks every command-line path up front (a typo in the fifth path
// fails before an hour-long pass over the first four); next() opens them lazily, one at a time, so
// 1500 small .gz files cost one decoder's memory, not 1500.
class InputSet {
 public:
  InputSet();
  ~InputSet();

  // A file, a directory (read recursively, in name order), "-" for stdin. arfuseInvalidArgument
  // ("PATH: <strerror>") when the path does not exist or cannot be read, or "-" comes twice. A path named here is
  // opened as it is (a FIFO or `<(cmd)` is read: the caller asked for it); a file found by walking a directory must be
  // a regular file inside that directory (a symbolic link is followed only when its target is inside
  // too) and still be the same file when it is opened: anything else (a FIFO, which would block the
  // open; a device; a file swapped since the walk) is skipped with a warning, never waited on.
  Status add(const std::string& path);

  // The next log, or false when none is left. Unreadable or binary entries are skipped with a
  // warning (warnings()).
  bool next(LogInput* in);

  const std::vector<std::string>& warnings() const { return warnings_; }
  uint64_t skipped() const { return skipped_; }  // logs skipped (binary, unreadable, corrupt)
  uint64_t opened() const { return opened_; }    // logs delivered by next()

  static constexpr size_t kMaxFiles = 200000;  // per directory walk
  static constexpr size_t kMaxWarnings = 64;   // kept verbatim; the rest are counted

  void warn(const std::string& w);

 private:
  // A path still to open. Walked: found in a directory, with the identity the walk saw.
  struct Pending {
    std::string path;
    bool walked = false;
    uint64_t dev = 0, ino = 0;
  };
  bool openPath(const Pending& p, LogInput* in);

  std::deque<Pending> pending_;     // paths still to open
  std::unique_ptr<TarCursor> tar_;  // the archive being read member by member
  std::vector<std::string> warnings_;
  uint64_t moreWarnings_ = 0, skipped_ = 0, opened_ = 0;
  bool stdinUsed_ = false;
};

// Decoding helpers shared by files and archive members (input.cc).
// *out = `raw`, wrapped in a gzip or xz decoder when its first bytes say so; *kind is "none", "gzip"
// or "xz". arfuseUnsupported, naming `name` and how to decompress it, for a compression this build
// cannot read (zstd, xz without liblzma).
Status decode(std::unique_ptr<ByteSource> raw, const std::string& name, std::string* kind,
              std::unique_ptr<ByteSource>* out);
// A source whose first bytes can be looked at before they are read.
class PeekSource : public ByteSource {
 public:
  explicit PeekSource(std::unique_ptr<ByteSource> in) : in_(std::move(in)) {}
  // Up to n bytes from the start (fewer at the end of the stream); does not consume them.
  std::string_view peek(size_t n);
  long read(char* dst, size_t n) override;

 private:
  std::unique_ptr<ByteSource> in_;
  std::string head_;
  size_t pos_ = 0;
  bool eof_ = false;
};
// True when the first bytes look like binary data rather than log text (NUL bytes, or mostly
// control bytes).
bool looksBinary(std::string_view head);
// A source reading a file descriptor (owned) or stdin.
std::unique_ptr<ByteSource> fileSource(int fd, bool owns);

}  // namespace triage
}  // namespace arfuse
