// InputSet: command-line paths -> logs. Directories are walked in name order; tar archives (plain,
// gzip or xz) are read member by member from one stream, each member being one log (itself plain,
// gzip or xz). The tar reader is small and hand-written on purpose: it reuses the decoders above,
// whose memory limits are ours, and reads only ustar/GNU/pax headers (the formats GNU tar and
// Python's tarfile write); everything else in an archive is skipped.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "input.h"

namespace arfuse {
namespace triage {

namespace {

constexpr size_t kBlock = 512;
constexpr size_t kMaxName = 4096;
constexpr size_t kBinaryProbe = 8192;

// Numeric header field: octal text, or GNU base-256 (high bit of the first byte set).
bool tarNumber(const char* f, size_t n, uint64_t* v) {
  const auto* u = reinterpret_cast<const unsigned char*>(f);
  uint64_t r = 0;
  if (u[0] & 0x80) {
    for (size_t i = 1; i < n; ++i) {
      if (r >> 56) return false;  // does not fit: no real log member is that big
      r = (r << 8) | u[i];
    }
    *v = r;
    return true;
  }
  size_t i = 0;
  while (i < n && (f[i] == ' ' || f[i] == '\0')) ++i;
  for (; i < n && f[i] >= '0' && f[i] <= '7'; ++i) {
    if (r >> 60) return false;
    r = r * 8 + static_cast<uint64_t>(f[i] - '0');
  }
  *v = r;
  return true;
}

bool tarChecksumOk(const char* h) {
  uint64_t want = 0;
  if (!tarNumber(h + 148, 8, &want)) return false;
  uint64_t sum = 0;
  for (size_t i = 0; i < kBlock; ++i)
    sum += (i >= 148 && i < 156) ? static_cast<unsigned char>(' ') : static_cast<unsigned char>(h[i]);
  return sum == want;
}

std::string field(const char* f, size_t n) { return std::string(f, strnlen(f, n)); }

bool isTarHeader(std::string_view h) {
  return h.size() >= kBlock && h.compare(257, 5, "ustar") == 0 && tarChecksumOk(h.data());
}

}  // namespace

// Reads an archive's members in order from one decoded stream.
class TarCursor {
 public:
  TarCursor(std::unique_ptr<ByteSource> in, std::string name, std::string kind)
      : in_(std::move(in)), name_(std::move(name)), kind_(std::move(kind)) {}

  // Positions on the next regular-file member; false at the end (or on a corrupt header, with
  // *warning set).
  bool nextMember(std::string* member, std::string* warning) {
    if (!skip(left_ + pad_)) return truncated(warning);
    left_ = pad_ = 0;
    std::string longName;
    for (;;) {
      char h[kBlock];
      const size_t got = readFull(h, kBlock);
      if (got == 0 && in_->err.empty()) return false;
      if (got < kBlock) return truncated(warning);
      if (std::all_of(h, h + kBlock, [](char c) { return c == 0; })) return false;  // end-of-archive block
      if (!tarChecksumOk(h)) {
        *warning = name_ + ": a header after member '" + last_ + "' is corrupt; the rest of the archive is skipped";
        return false;
      }
      uint64_t size = 0;
      tarNumber(h + 124, 12, &size);
      const char type = h[156];
      const uint64_t pad = (kBlock - size % kBlock) % kBlock;
      if (type == 'L' || type == 'x') {  // GNU long name / pax extended header for the next member
        std::string data;
        if (!readSome(size, kMaxName, &data)) return truncated(warning);
        if (!skip(pad)) return truncated(warning);
        if (type == 'L') {
          longName = field(data.data(), data.size());
        } else {
          // Records "LEN key=value\n"; only the path matters here.
          size_t at = data.find(" path=");
          if (at != std::string::npos) longName = data.substr(at + 6, data.find('\n', at) - at - 6);
        }
        continue;
      }
      std::string path = longName;
      if (path.empty()) {
        const std::string prefix = field(h + 345, 155), base = field(h, 100);
        path = prefix.empty() ? base : prefix + "/" + base;
      }
      longName.clear();
      if (type == '0' || type == '\0' || type == '7') {
        left_ = size;
        pad_ = pad;
        last_ = path;
        *member = path;
        return true;
      }
      if (!skip(size + pad)) return truncated(warning);  // directories, links, devices: no log
    }
  }

  // The current member's bytes.
  long readMember(char* dst, size_t n) {
    if (left_ == 0) return 0;
    long got = in_->read(dst, static_cast<size_t>(std::min<uint64_t>(n, left_)));
    if (got > 0) left_ -= static_cast<uint64_t>(got);
    if (got == 0) left_ = 0;  // truncated archive: the member ends early
    return got;
  }
  const std::string& err() const { return in_->err; }
  const std::string& name() const { return name_; }
  const std::string& kind() const { return kind_; }

 private:
  size_t readFull(char* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      long got = in_->read(dst + done, n - done);
      if (got <= 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }
  bool skip(uint64_t n) {
    char tmp[16384];
    while (n > 0) {
      long got = in_->read(tmp, static_cast<size_t>(std::min<uint64_t>(n, sizeof(tmp))));
      if (got <= 0) return false;
      n -= static_cast<uint64_t>(got);
    }
    return true;
  }
  // Reads n bytes, keeping at most keep of them.
  bool readSome(uint64_t n, size_t keep, std::string* out) {
    out->resize(static_cast<size_t>(std::min<uint64_t>(n, keep)));
    if (readFull(out->data(), out->size()) != out->size()) return false;
    return skip(n - out->size());
  }
  bool truncated(std::string* warning) {
    *warning = name_ + ": the archive ends early (truncated" + (in_->err.empty() ? "" : ": " + in_->err) +
               "); members read so far are analysed";
    return false;
  }

  std::unique_ptr<ByteSource> in_;
  std::string name_, kind_, last_;
  uint64_t left_ = 0, pad_ = 0;
};

namespace {

// One member as a byte stream (borrows the cursor; valid until the cursor moves on).
class MemberSource : public ByteSource {
 public:
  explicit MemberSource(TarCursor* t) : t_(t) {}
  long read(char* dst, size_t n) override {
    long got = t_->readMember(dst, n);
    if (got < 0) err = t_->err();
    return got;
  }

 private:
  TarCursor* t_;
};

// A regular file a directory walk found, and which file it was then (device, inode).
struct Walked {
  std::string path;
  uint64_t dev = 0, ino = 0;
};

// Regular files under dir, recursively, in name order. Symbolic links to directories are not
// followed (no cycles); a link to a file is followed only when its target is inside `root` (the
// real path of the directory given): a link planted in a log directory must not make triage print
// a line of a file outside it (a 0600 file of the user running triage became "evidence" so).
void walk(const std::string& dir, const std::string& root, std::vector<Walked>* out, InputSet* set, int depth) {
  if (depth > 32) {
    set->warn(dir + ": directories nested deeper than 32 levels are not read");
    return;
  }
  DIR* d = opendir(dir.c_str());
  if (!d) {
    set->warn(dir + ": " + std::strerror(errno) + " (skipped)");
    return;
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    if (out->size() >= InputSet::kMaxFiles) {
      set->warn(dir + ": more than " + std::to_string(InputSet::kMaxFiles) + " files; the rest are not read");
      return;
    }
    const std::string p = dir + "/" + n;
    struct stat st;
    if (lstat(p.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      walk(p, root, out, set, depth + 1);
      continue;
    }
    if (S_ISLNK(st.st_mode)) {
      char* real = realpath(p.c_str(), nullptr);
      const std::string target = real ? real : "";
      std::free(real);
      if (target.empty() || stat(target.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // dangling, or no file
      if (target.compare(0, root.size() + 1, root + "/") != 0) {
        set->warn(p + ": a symbolic link to " + target + ", outside " + root + " (not followed)");
        continue;
      }
    }
    if (S_ISREG(st.st_mode))
      out->push_back(Walked{p, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)});
  }
}

const char* fileKind(mode_t m) {
  return S_ISFIFO(m)   ? "a FIFO"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISSOCK(m) ? "a socket"
         : S_ISDIR(m)  ? "a directory"
                       : "not a regular file";
}

}  // namespace

InputSet::InputSet() = default;
InputSet::~InputSet() = default;

void InputSet::warn(const std::string& w) {
  if (warnings_.size() < kMaxWarnings)
    warnings_.push_back(w);
  else
    ++moreWarnings_;
  if (moreWarnings_ == 1 && warnings_.size() == kMaxWarnings)
    warnings_.push_back("(further warnings are counted only)");
}

Status InputSet::add(const std::string& path) {
  if (path == "-") {
    if (stdinUsed_) return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "'-' (stdin) given twice");
    stdinUsed_ = true;
    pending_.push_back(Pending{path});
    return Status();
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, path + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    std::vector<Walked> files;
    char* real = realpath(path.c_str(), nullptr);
    const std::string root = real ? real : path;
    std::free(real);
    walk(path.size() > 1 && path.back() == '/' ? path.substr(0, path.size() - 1) : path, root, &files, this, 0);
    if (files.empty()) warn(path + ": the directory holds no files");
    for (auto& f : files) pending_.push_back(Pending{std::move(f.path), true, f.dev, f.ino});
    return Status();
  }
  if (access(path.c_str(), R_OK) != 0)
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, path + ": " + std::strerror(errno));
  pending_.push_back(Pending{path});
  return Status();
}

namespace {

// A file the walk found, opened without blocking (O_NONBLOCK: a FIFO put in its place since has no
// writer and would block a plain open forever) and checked to be that same regular file; -1 with a
// warning otherwise. Regular files ignore O_NONBLOCK; it is cleared all the same.
int openWalked(const std::string& path, uint64_t dev, uint64_t ino, InputSet* set) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    set->warn(path + ": " + std::strerror(errno) + " (skipped)");
    return -1;
  }
  struct stat st;
  std::string why;
  if (fstat(fd, &st) != 0)
    why = std::strerror(errno);
  else if (!S_ISREG(st.st_mode))
    why = std::string("is now ") + fileKind(st.st_mode) + ", not the regular file the directory walk found";
  else if (static_cast<uint64_t>(st.st_dev) != dev || static_cast<uint64_t>(st.st_ino) != ino)
    why = "was replaced by another file after the directory walk";
  if (!why.empty()) {
    ::close(fd);
    set->warn(path + ": " + why + " (skipped)");
    return -1;
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

}  // namespace

// Opens a log (a file, stdin, or the next member of the archive being read); false when this entry
// yields nothing to read (skipped with a warning, or an archive at its end).
bool InputSet::openPath(const Pending& p, LogInput* in) {
  const std::string& path = p.path;
  std::unique_ptr<ByteSource> raw;
  if (path == "-" && !p.walked) {
    raw = fileSource(STDIN_FILENO, false);
  } else {
    const int fd = p.walked ? openWalked(path, p.dev, p.ino, this) : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (!p.walked) warn(path + ": " + std::strerror(errno) + " (skipped)");
      ++skipped_;
      return false;
    }
    raw = fileSource(fd, true);
  }
  const std::string name = path == "-" ? "<stdin>" : path;
  std::string kind;
  std::unique_ptr<ByteSource> decoded;
  const Status unread = decode(std::move(raw), name, &kind, &decoded);
  if (!unread.ok()) {
    warn(unread.message() + " (skipped)");
    ++skipped_;
    return false;
  }
  auto peek = std::make_unique<PeekSource>(std::move(decoded));
  std::string_view head = peek->peek(kBinaryProbe);
  if (isTarHeader(head)) {
    tar_ = std::make_unique<TarCursor>(std::move(peek), name, kind);
    return false;  // members come from next()
  }
  if (!peek->err.empty() && head.empty()) {
    warn(name + ": " + peek->err + " (skipped)");
    ++skipped_;
    return false;
  }
  if (looksBinary(head)) {
    warn(name + ": binary data, not a log (skipped)");
    ++skipped_;
    return false;
  }
  in->name = name;
  in->compression = kind;
  in->reader = std::make_unique<LineReader>(std::move(peek));
  return true;
}

bool InputSet::next(LogInput* in) {
  in->reader.reset();  // a member's reader borrows the archive cursor: it must go before the cursor moves
  for (;;) {
    if (tar_) {
      std::string member, warning;
      if (!tar_->nextMember(&member, &warning)) {
        if (!warning.empty()) warn(warning);
        tar_.reset();
        continue;
      }
      const std::string name = tar_->name() + ":" + member;
      std::string kind;
      std::unique_ptr<ByteSource> decoded;
      const Status unread = decode(std::make_unique<MemberSource>(tar_.get()), name, &kind, &decoded);
      if (!unread.ok()) {
        warn(unread.message() + " (skipped)");
        ++skipped_;
        continue;
      }
      auto peek = std::make_unique<PeekSource>(std::move(decoded));
      std::string_view head = peek->peek(kBinaryProbe);
      if (isTarHeader(head)) {
        warn(name + ": an archive inside an archive is not read (skipped)");
        ++skipped_;
        continue;
      }
      if (looksBinary(head)) {
        warn(name + ": binary data, not a log (skipped)");
        ++skipped_;
        continue;
      }
      in->name = name;
      in->compression = kind != "none" ? kind : tar_->kind();
      in->reader = std::make_unique<LineReader>(std::move(peek));
      ++opened_;
      return true;
    }
    if (pending_.empty()) return false;
    const Pending p = std::move(pending_.front());
    pending_.pop_front();
    if (openPath(p, in)) {
      ++opened_;
      return true;
    }
  }
}

}  // namespace triage
}  // namespace arfuse
