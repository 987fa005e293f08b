#include "input.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>

#if ARFUSE_TRIAGE_HAVE_LZMA
#include <lzma.h>
#endif

namespace arfuse {
namespace triage {

// A byte stream: read() returns bytes produced, 0 at end, -1 on error (message in error()).
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual long read(char* dst, size_t n) = 0;
  virtual const char* kind() const = 0;
  std::string err;
};

namespace {

constexpr size_t kChunk = 1 << 20;

// The underlying file, with the first bytes already read for magic detection.
class FileSource : public ByteSource {
 public:
  FileSource(FILE* f, bool owns) : f_(f), owns_(owns) {}
  ~FileSource() override {
    if (owns_ && f_) std::fclose(f_);
  }
  // Reads the magic bytes and keeps them to be returned first.
  void peek(size_t n) {
    head_.resize(n);
    size_t got = std::fread(head_.data(), 1, n, f_);
    head_.resize(got);
  }
  const std::string& head() const { return head_; }
  long read(char* dst, size_t n) override {
    size_t done = 0;
    if (headPos_ < head_.size()) {
      done = std::min(n, head_.size() - headPos_);
      std::memcpy(dst, head_.data() + headPos_, done);
      headPos_ += done;
      if (done == n) return static_cast<long>(done);
    }
    size_t got = std::fread(dst + done, 1, n - done, f_);
    if (got == 0 && std::ferror(f_)) {
      err = std::strerror(errno);
      return -1;
    }
    return static_cast<long>(done + got);
  }
  const char* kind() const override { return "none"; }

 private:
  FILE* f_;
  bool owns_;
  std::string head_;
  size_t headPos_ = 0;
};

class GzipSource : public ByteSource {
 public:
  explicit GzipSource(std::unique_ptr<FileSource> in) : in_(std::move(in)), inBuf_(kChunk) {
    std::memset(&zs_, 0, sizeof(zs_));
    ok_ = inflateInit2(&zs_, 15 + 32) == Z_OK;  // +32: accept gzip and zlib headers
    if (!ok_) err = "zlib init failed";
  }
  ~GzipSource() override { inflateEnd(&zs_); }
  long read(char* dst, size_t n) override {
    if (!ok_) return -1;
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
  const char* kind() const override { return "gzip"; }

 private:
  std::unique_ptr<FileSource> in_;
  std::vector<char> inBuf_;
  z_stream zs_;
  bool ok_ = false, inEof_ = false, streamEnded_ = false;
};

#if ARFUSE_TRIAGE_HAVE_LZMA
class XzSource : public ByteSource {
 public:
  explicit XzSource(std::unique_ptr<FileSource> in) : in_(std::move(in)), inBuf_(kChunk) {
    ok_ = lzma_stream_decoder(&xs_, UINT64_MAX, LZMA_CONCATENATED) == LZMA_OK;
    if (!ok_) err = "liblzma init failed";
  }
  ~XzSource() override { lzma_end(&xs_); }
  long read(char* dst, size_t n) override {
    if (!ok_) return -1;
    if (done_) return 0;
    xs_.next_out = reinterpret_cast<uint8_t*>(dst);
    xs_.avail_out = n;
    while (xs_.avail_out == n) {
      lzma_action action = LZMA_RUN;
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
      if (inEof_) action = LZMA_FINISH;
      lzma_ret rc = lzma_code(&xs_, action);
      if (rc == LZMA_STREAM_END) {
        done_ = true;
        break;
      }
      if (rc != LZMA_OK) {
        err = "xz: corrupt or truncated data (lzma error " + std::to_string(static_cast<int>(rc)) + ")";
        return -1;
      }
    }
    return static_cast<long>(n - xs_.avail_out);
  }
  const char* kind() const override { return "xz"; }

 private:
  std::unique_ptr<FileSource> in_;
  std::vector<char> inBuf_;
  lzma_stream xs_ = LZMA_STREAM_INIT;
  bool ok_ = false, inEof_ = false, done_ = false;
};
#endif

}  // namespace

LineReader::~LineReader() = default;

std::unique_ptr<LineReader> LineReader::open(const std::string& path, std::string* error) {
  FILE* f = nullptr;
  bool owns = false;
  if (path == "-") {
    f = stdin;
  } else {
    f = std::fopen(path.c_str(), "rb");
    if (!f) {
      *error = path + ": " + std::strerror(errno);
      return nullptr;
    }
    owns = true;
  }
  auto file = std::make_unique<FileSource>(f, owns);
  file->peek(6);
  const std::string& h = file->head();
  std::unique_ptr<LineReader> r(new LineReader());
  if (h.size() >= 2 && static_cast<unsigned char>(h[0]) == 0x1f && static_cast<unsigned char>(h[1]) == 0x8b) {
    r->src_ = std::make_unique<GzipSource>(std::move(file));
  } else if (h.size() >= 6 && std::memcmp(h.data(),
                                          "\xFD"
                                          "7zXZ\0",
                                          6) == 0) {
#if ARFUSE_TRIAGE_HAVE_LZMA
    r->src_ = std::make_unique<XzSource>(std::move(file));
#else
    *error = path + ": xz-compressed, but this build has no liblzma; decompress first (xz -dc " + path +
             " | arfuse triage -)";
    return nullptr;
#endif
  } else if (h.size() >= 4 && std::memcmp(h.data(), "\x28\xB5\x2F\xFD", 4) == 0) {
    *error = path + ": zstd-compressed, which triage does not read; decompress first (zstd -dc " + path +
             " | arfuse triage -)";
    return nullptr;
  } else {
    r->src_ = std::move(file);
  }
  r->buf_.resize(kChunk + kMaxLine);
  return r;
}

const char* LineReader::compression() const { return src_ ? src_->kind() : "none"; }

bool LineReader::fill() {
  // Compact, then read more after the pending bytes.
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (eof_ || end_ == buf_.size()) return false;
  long got = src_->read(buf_.data() + end_, buf_.size() - end_);
  if (got < 0) {
    error_ = src_->err;
    eof_ = true;
    return false;
  }
  if (got == 0) {
    eof_ = true;
    return false;
  }
  end_ += static_cast<size_t>(got);
  bytes_ += static_cast<uint64_t>(got);
  return true;
}

bool LineReader::next(std::string_view* line) {
  for (;;) {
    const char* base = buf_.data();
    const char* nl = static_cast<const char*>(std::memchr(base + begin_, '\n', end_ - begin_));
    size_t lineEnd = 0, after = 0;
    if (nl) {
      lineEnd = static_cast<size_t>(nl - base);
      after = lineEnd + 1;
    } else if (end_ - begin_ >= kMaxLine || (eof_ && end_ > begin_)) {
      lineEnd = std::min(end_, begin_ + kMaxLine);
      after = lineEnd;
    } else {
      if (!fill() && eof_ && end_ == begin_) return false;
      continue;
    }
    size_t start = begin_;
    begin_ = after;
    if (skipping_) {
      if (nl) skipping_ = false;
      continue;
    }
    if (!nl && !eof_) skipping_ = true;  // cut: drop the remainder up to the next newline
    std::string_view v(base + start, lineEnd - start);
    if (!v.empty() && v.back() == '\r') v.remove_suffix(1);
    if (std::memchr(v.data(), 0x1b, v.size())) {  // strip ANSI CSI sequences (coloured loggers)
      scratch_.clear();
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] == 0x1b && i + 1 < v.size() && v[i + 1] == '[') {
          i += 2;
          while (i < v.size() && !(v[i] >= 0x40 && v[i] <= 0x7e)) ++i;
          continue;
        }
        scratch_.push_back(v[i]);
      }
      v = scratch_;
    }
    *line = v;
    return true;
  }
}

}  // namespace triage
}  // namespace arfuse
