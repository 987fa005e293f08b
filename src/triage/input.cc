#include "input.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#if ARFUSE_TRIAGE_HAVE_LZMA
#include <lzma.h>
#endif

namespace arfuse {
namespace triage {

namespace {

constexpr size_t kChunk = 1 << 20;

class FdSource : public ByteSource {
 public:
  FdSource(int fd, bool owns) : fd_(fd), owns_(owns) {}
  ~FdSource() override {
    if (owns_ && fd_ >= 0) ::close(fd_);
  }
  long read(char* dst, size_t n) override {
    for (;;) {
      ssize_t got = ::read(fd_, dst, n);
      if (got >= 0) return static_cast<long>(got);
      if (errno == EINTR) continue;
      err = std::strerror(errno);
      return -1;
    }
  }

 private:
  int fd_;
  bool owns_;
};

class GzipSource : public ByteSource {
 public:
  explicit GzipSource(std::unique_ptr<ByteSource> in) : in_(std::move(in)), inBuf_(kChunk) {
    std::memset(&zs_, 0, sizeof(zs_));
    ok_ = inflateInit2(&zs_, 15 + 32) == Z_OK;  // +32: accept gzip and zlib headers
    if (!ok_) err = "zlib init failed";
  }
  ~GzipSource() override { inflateEnd(&zs_); }
  long read(char* dst, size_t n) override {
    if (!ok_) return -1;
    n = std::min<size_t>(n, 1u << 30);
    zs_.next_out = reinterpret_cast<Bytef*>(dst);
    zs_.avail_out = static_cast<uInt>(n);
    while (zs_.avail_out == n) {
      if (zs_.avail_in == 0) {
        if (inEof_) {
          if (!streamEnded_) {
            err = "truncated gzip stream";
            return -1;
          }
          return 0;
        }
        long got = in_->read(inBuf_.data(), inBuf_.size());
        if (got < 0) {
          err = in_->err;
          return -1;
        }
        if (got == 0) {
          inEof_ = true;
          continue;
        }
        zs_.next_in = reinterpret_cast<Bytef*>(inBuf_.data());
        zs_.avail_in = static_cast<uInt>(got);
      }
      if (streamEnded_) {  // another gzip member follows (concatenated .gz, e.g. rotated logs)
        inflateReset(&zs_);
        streamEnded_ = false;
      }
      int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        streamEnded_ = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        err = std::string("gzip: ") + (zs_.msg ? zs_.msg : "corrupt data");
        return -1;
      }
    }
    return static_cast<long>(n - zs_.avail_out);
  }

 private:
  std::unique_ptr<ByteSource> in_;
  std::vector<char> inBuf_;
  z_stream zs_;
  bool ok_ = false, inEof_ = false, streamEnded_ = false;
};

#if ARFUSE_TRIAGE_HAVE_LZMA
class XzSource : public ByteSource {
 public:
  explicit XzSource(std::unique_ptr<ByteSource> in) : in_(std::move(in)), inBuf_(kChunk) {
    ok_ = lzma_stream_decoder(&xs_, kXzMemLimit, LZMA_CONCATENATED) == LZMA_OK;
    if (!ok_) err = "liblzma init failed";
  }
  ~XzSource() override { lzma_end(&xs_); }
  long read(char* dst, size_t n) override {
    if (!ok_) return -1;
    if (done_) return 0;
    xs_.next_out = reinterpret_cast<uint8_t*>(dst);
    xs_.avail_out = n;
    while (xs_.avail_out == n) {
      if (xs_.avail_in == 0 && !inEof_) {
        long got = in_->read(inBuf_.data(), inBuf_.size());
        if (got < 0) {
          err = in_->err;
          return -1;
        }
        if (got == 0) inEof_ = true;
        xs_.next_in = reinterpret_cast<const uint8_t*>(inBuf_.data());
        xs_.avail_in = static_cast<size_t>(got);
      }
      lzma_ret rc = lzma_code(&xs_, inEof_ ? LZMA_FINISH : LZMA_RUN);
      if (rc == LZMA_STREAM_END) {
        done_ = true;
        break;
      }
      if (rc == LZMA_MEMLIMIT_ERROR) {
        err = "xz: decoding needs " + std::to_string(lzma_memusage(&xs_) >> 20) + " MiB, over triage's " +
              std::to_string(kXzMemLimit >> 20) + " MiB limit (a dictionary that large is not a log's); " +
              "decompress it yourself if you trust it (xz -dc FILE | arfuse triage -)";
        return -1;
      }
      if (rc != LZMA_OK) {
        err = "xz: corrupt or truncated data (lzma error " + std::to_string(static_cast<int>(rc)) + ")";
        return -1;
      }
    }
    return static_cast<long>(n - xs_.avail_out);
  }

 private:
  std::unique_ptr<ByteSource> in_;
  std::vector<char> inBuf_;
  lzma_stream xs_ = LZMA_STREAM_INIT;
  bool ok_ = false, inEof_ = false, done_ = false;
};
#endif

}  // namespace

std::unique_ptr<ByteSource> fileSource(int fd, bool owns) { return std::make_unique<FdSource>(fd, owns); }

std::string_view PeekSource::peek(size_t n) {
  while (head_.size() - pos_ < n && !eof_) {
    char tmp[8192];
    long got = in_->read(tmp, std::min(sizeof(tmp), n - (head_.size() - pos_)));
    if (got <= 0) {
      if (got < 0) err = in_->err;
      eof_ = true;
      break;
    }
    head_.append(tmp, static_cast<size_t>(got));
  }
  return std::string_view(head_).substr(pos_, n);
}

long PeekSource::read(char* dst, size_t n) {
  if (pos_ < head_.size()) {
    size_t k = std::min(n, head_.size() - pos_);
    std::memcpy(dst, head_.data() + pos_, k);
    pos_ += k;
    if (pos_ == head_.size()) {
      head_.clear();
      pos_ = 0;
    }
    return static_cast<long>(k);
  }
  if (!err.empty()) return -1;
  long got = in_->read(dst, n);
  if (got < 0) err = in_->err;
  return got;
}

Status decode(std::unique_ptr<ByteSource> raw, const std::string& name, std::string* kind,
              std::unique_ptr<ByteSource>* out) {
  auto peek = std::make_unique<PeekSource>(std::move(raw));
  std::string_view h = peek->peek(6);
  *kind = "none";
  if (h.size() >= 2 && static_cast<unsigned char>(h[0]) == 0x1f && static_cast<unsigned char>(h[1]) == 0x8b) {
    *kind = "gzip";
    *out = std::make_unique<GzipSource>(std::move(peek));
    return Status();
  }
  if (h.size() >= 6 && std::memcmp(h.data(),
                                   "\xFD"
                                   "7zXZ\0",
                                   6) == 0) {
#if ARFUSE_TRIAGE_HAVE_LZMA
    *kind = "xz";
    *out = std::make_unique<XzSource>(std::move(peek));
    return Status();
#else
    return ARFUSE_FAIL_TEXT(arfuseUnsupported,
                            name + ": xz-compressed, but this build has no liblzma; decompress first (xz -dc " + name +
                                " | arfuse triage -)");
#endif
  }
  if (h.size() >= 4 && std::memcmp(h.data(), "\x28\xB5\x2F\xFD", 4) == 0) {
    return ARFUSE_FAIL_TEXT(arfuseUnsupported,
                            name + ": zstd-compressed, which triage does not read; decompress first (zstd -dc " + name +
                                " | arfuse triage -)");
  }
  *out = std::move(peek);
  return Status();
}

bool looksBinary(std::string_view head) {
  if (head.empty()) return false;
  size_t control = 0, nul = 0;
  for (unsigned char c : head) {
    nul += c == 0;
    if (c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != 0x1b && c != '\f' && c != '\b') ++control;
  }
  // Executables, images and core dumps are full of NUL bytes; a log may hold a stray one (a writer
  // killed mid-line), which is shown escaped, not a reason to skip the file.
  return nul * 100 > head.size() || control * 10 > head.size();
}

// ---------------------------------------------------------------------------------------------
// LineReader
// ---------------------------------------------------------------------------------------------

LineReader::LineReader(std::unique_ptr<ByteSource> src) : src_(std::move(src)), buf_(kChunk + kWindow) {}
LineReader::~LineReader() = default;

bool LineReader::fill() {
  if (begin_ > 0) {  // compact, then read more after the pending bytes
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    nlAt_ = nlAt_ > begin_ ? nlAt_ - begin_ : 0;  // the scan caches move with the bytes
    crAt_ = crAt_ > begin_ ? crAt_ - begin_ : 0;
    begin_ = 0;
  }
  if (eof_ || end_ == buf_.size()) return false;
  long got = src_->read(buf_.data() + end_, buf_.size() - end_);
  if (got <= 0) {
    if (got < 0) error_ = src_->err;
    eof_ = true;
    return false;
  }
  end_ += static_cast<size_t>(got);
  bytes_ += static_cast<uint64_t>(got);
  return true;
}

size_t LineReader::find(char c, size_t from, size_t limit, size_t* at) {
  if (*at < from) *at = from;  // the cache is behind: nothing known past `from`
  if (*at < limit && buf_[*at] != c) {
    const void* hit = std::memchr(buf_.data() + *at, c, limit - *at);
    *at = hit ? static_cast<size_t>(static_cast<const char*>(hit) - buf_.data()) : limit;
  }
  return std::min(*at, limit);
}

bool LineReader::next(std::string_view* segment, bool* sameLine) {
  for (;;) {
    const char* base = buf_.data();
    const size_t avail = end_ - begin_;
    const size_t look = std::min(avail, kWindow);
    // First '\n' or '\r' within the window (memchr, vectorised; each byte searched once per
    // terminator however short the segments: the caches remember where each search stopped).
    const char* p = base + begin_;
    const size_t limit = begin_ + look;
    const size_t nl = find('\n', begin_, limit, &nlAt_);
    const size_t cr = find('\r', begin_, std::min(nl, limit), &crAt_);
    const size_t t = std::min(nl, cr);
    const char* term = t < limit ? base + t : nullptr;
    if (!term && avail < kWindow && !eof_) {  // need more bytes to find the end
      fill();
      continue;
    }
    if (!term && avail == 0) return false;
    size_t len = 0, advance = 0;
    bool lineEnds = true;  // the next segment starts a new line
    if (term) {
      len = static_cast<size_t>(term - p);
      advance = len + 1;
      if (*term == '\r') {
        if (len + 1 < avail) {
          if (p[len + 1] == '\n') {
            ++advance;  // CRLF
          } else {
            lineEnds = false;  // a lone '\r': the rest of the line is redrawn text
          }
        } else if (!eof_) {
          fill();  // is the '\r' followed by '\n'? look at the next byte
          continue;
        }
      }
    } else if (avail >= kWindow) {
      // No terminator in a whole window: deliver it, keep the last kOverlap bytes for the next.
      len = kWindow;
      advance = kWindow - kOverlap;
      lineEnds = false;
      if (!inWindows_) ++windowed_;
      inWindows_ = true;
    } else {  // the last line of the stream, without a newline
      len = avail;
      advance = avail;
    }
    std::string_view v(p, len);
    begin_ += advance;
    // An empty segment a lone '\r' ends (a progress bar redrawing nothing) says nothing: skipped, and
    // the next segment takes its place in the line (whether it starts one). A run of '\r' then costs
    // the scan of its bytes, not a segment each through the analyzer (a gzip of 1 GB of '\r': 158 s of
    // CPU with one segment per byte, 14 s without).
    if (len == 0 && !lineEnds) continue;
    *sameLine = pendingSameLine_;
    pendingSameLine_ = !lineEnds;
    if (lineEnds) inWindows_ = false;
    *segment = clean(v);
    return true;
  }
}

// Removes CSI (ESC [ ... final byte) and OSC (ESC ] ... BEL or ESC \) sequences, also when a syslog
// daemon wrote ESC as "#033".
std::string_view LineReader::clean(std::string_view v) {
  const bool esc = std::memchr(v.data(), 0x1b, v.size()) != nullptr;
  const bool hash = !esc && v.find("#033[") != std::string_view::npos;
  if (!esc && !hash) return v;
  scratch_.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    size_t introLen = 0;
    if (v[i] == 0x1b && i + 1 < v.size()) introLen = 1;
    if (v[i] == '#' && v.compare(i, 4, "#033") == 0 && i + 4 < v.size()) introLen = 4;
    if (introLen) {
      const char kind = v[i + introLen];
      if (kind == '[') {
        size_t j = i + introLen + 1;
        while (j < v.size() && !(v[j] >= 0x40 && v[j] <= 0x7e)) ++j;
        i = j;
        continue;
      }
      if (kind == ']' && introLen == 1) {
        size_t j = i + 2;
        while (j < v.size() && v[j] != 0x07 && !(v[j] == 0x1b && j + 1 < v.size() && v[j + 1] == '\\')) ++j;
        i = (j < v.size() && v[j] == 0x1b) ? j + 1 : j;
        continue;
      }
    }
    scratch_.push_back(v[i]);
  }
  return scratch_;
}

}  // namespace triage
}  // namespace arfuse
