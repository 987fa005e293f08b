#include "json.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string_view>

namespace arfuse {
namespace topo {
namespace json {

const char* kindName(Value::Kind k) {
  // Indexed by Value::Kind, in its order.
  static constexpr const char* kNames[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
  static_assert(sizeof kNames / sizeof kNames[0] == static_cast<size_t>(Value::Kind::kObject) + 1);
  const auto i = static_cast<size_t>(k);
  return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : "?";
}

namespace {

constexpr int kMaxDepth = 64;

// JSON's two-character escapes: the letter after the backslash (kEscapeLetters[k]) and the character
// it stands for (kEscapedChars[k]). The reader takes all of them; the writer all but "\/" (a '/'
// needs none), \u00XX for the other control characters: one spelling per character.
constexpr std::string_view kEscapeLetters = "\"\\/bfnrt";
constexpr std::string_view kEscapedChars = "\"\\/\b\f\n\r\t";
static_assert(kEscapeLetters.size() == kEscapedChars.size());

// A key as an error message quotes it: at most 64 bytes of it (a key may be megabytes long).
std::string quoted(const std::string& k) {
  if (k.size() <= 64) return "\"" + k + "\"";
  size_t cut = 64;
  while (cut > 0 && (static_cast<unsigned char>(k[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 sequence
  return "\"" + k.substr(0, cut) + "...\" (" + std::to_string(k.size()) + " bytes)";
}

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Status document(Value* out) {
    skipSpace();
    if (!value(out, 0)) return finish();
    skipSpace();
    if (i_ != s_.size()) fail("unexpected text after the end of the document");
    return finish();
  }

 private:
  // The first failure recorded (fail/failAt keep the grammar's functions bool), as the one Status.
  Status finish() const {
    if (err_.empty()) return Status();
    // Concatenated, not printf'd: a quoted key may hold a NUL (\u0000).
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument,
                            std::to_string(errPos_.line) + ":" + std::to_string(errPos_.col) + ": " + err_);
  }
  bool fail(const std::string& msg) { return failAt(pos(), msg); }
  bool failAt(Pos p, const std::string& msg) {
    if (err_.empty()) {
      err_ = msg;
      errPos_ = p;
    }
    return false;
  }
  Pos pos() const { return Pos{line_, static_cast<int>(i_ - lineStart_) + 1}; }
  bool atEnd() const { return i_ >= s_.size(); }
  char peek() const { return atEnd() ? '\0' : s_[i_]; }

  void skipSpace() {
    while (!atEnd()) {
      char c = s_[i_];
      if (c == '\n') {
        ++i_;
        ++line_;
        lineStart_ = i_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++i_;
      } else {
        break;
      }
    }
  }

  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return fail("invalid literal (expected a value)");
    i_ += word.size();
    return true;
  }

  bool value(Value* v, int depth) {
    if (depth > kMaxDepth) return fail("nesting deeper than 64 levels");
    if (++values_ > kMaxValues)
      return fail("more than " + std::to_string(kMaxValues) + " values: far larger than any file arfuse reads");
    v->pos = pos();
    if (atEnd()) return fail("unexpected end of input (expected a value)");
    char c = peek();
    if (c == '{') return object(v, depth);
    if (c == '[') return array(v, depth);
    if (c == '"') {
      v->kind = Value::Kind::kString;
      return string(&v->text);
    }
    if (c == 't' || c == 'f') {
      v->kind = Value::Kind::kBool;
      v->boolean = c == 't';
      return literal(c == 't' ? "true" : "false");
    }
    if (c == 'n') {
      v->kind = Value::Kind::kNull;
      return literal("null");
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number(v);
    return fail(std::string("unexpected character '") + c + "' (expected a value)");
  }

  bool digits() {
    size_t start = i_;
    while (!atEnd() && peek() >= '0' && peek() <= '9') ++i_;
    return i_ > start;
  }

  // RFC 8259 grammar exactly: no leading zeros, no '+', no bare '.', no hex, no NaN/Infinity.
  bool number(Value* v) {
    v->kind = Value::Kind::kNumber;
    size_t start = i_;
    if (peek() == '-') ++i_;
    if (peek() == '0') {
      ++i_;
      if (peek() >= '0' && peek() <= '9') return fail("leading zeros are not allowed in numbers");
    } else if (!digits()) {
      return fail("invalid number");
    }
    if (peek() == '.') {
      ++i_;
      if (!digits()) return fail("invalid number (digits expected after '.')");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++i_;
      if (peek() == '+' || peek() == '-') ++i_;
      if (!digits()) return fail("invalid number (digits expected in the exponent)");
    }
    v->text = std::string(s_.substr(start, i_ - start));
    return true;
  }

  static void appendUtf8(std::string* out, uint32_t cp) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  bool hex4(uint32_t* cp) {
    if (s_.size() - i_ < 4) return fail("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        v |= c - 'A' + 10;
      } else {
        return fail("invalid hex digit in \\u escape");
      }
    }
    *cp = v;
    return true;
  }

  bool string(std::string* out) {
    ++i_;  // opening quote
    out->clear();
    while (true) {
      if (atEnd()) return fail("unterminated string");
      char c = s_[i_];
      if (c == '"') {
        ++i_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character inside a string (escape it)");
      if (c != '\\') {
        out->push_back(c);
        ++i_;
        continue;
      }
      ++i_;
      if (atEnd()) return fail("unterminated string");
      char e = s_[i_++];
      if (const size_t k = kEscapeLetters.find(e); k != std::string_view::npos) {
        out->push_back(kEscapedChars[k]);
        continue;
      }
      if (e != 'u') return fail(std::string("invalid escape '\\") + e + "'");
      uint32_t cp = 0;
      if (!hex4(&cp)) return false;
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        uint32_t lo = 0;
        if (s_.substr(i_, 2) != "\\u") return fail("unpaired UTF-16 surrogate in \\u escape");
        i_ += 2;
        if (!hex4(&lo)) return false;
        if (lo < 0xDC00 || lo > 0xDFFF) return fail("unpaired UTF-16 surrogate in \\u escape");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        return fail("unpaired UTF-16 surrogate in \\u escape");
      }
      appendUtf8(out, cp);
    }
  }

  // The elements of an array or object after its opening bracket: element() for each, separated by
  // ',' and ended by `close` (at once when it is empty).
  template <typename F>
  bool sequence(char close, const char* what, F element) {
    ++i_;
    skipSpace();
    if (peek() == close) {
      ++i_;
      return true;
    }
    while (true) {
      skipSpace();
      if (!element()) return false;
      skipSpace();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() == close) {
        ++i_;
        return true;
      }
      return fail(std::string("expected ',' or '") + close + "' in " + what);
    }
  }

  bool array(Value* v, int depth) {
    v->kind = Value::Kind::kArray;
    return sequence(']', "an array", [&] {
      v->items.emplace_back();
      return value(&v->items.back(), depth + 1);
    });
  }

  bool object(Value* v, int depth) {
    v->kind = Value::Kind::kObject;
    // An ordered set: O(log n) comparisons per key whatever the keys are. Not a scan of the members
    // so far (quadratic: 100k keys took 44 s on a loaded 2-core box), and not an unseeded hash set
    // either: keys built to share one std::hash value made it quadratic again (160k keys, 4.4 MB:
    // ~80 s through `arfuse plan --topology` and ARFUSE_CALIBRATION_FILE, read at communicator init).
    std::set<std::string> seen;
    return sequence('}', "an object", [&] {
      if (peek() != '"') return fail("expected a key (a string) in an object");
      Member m;
      m.keyPos = pos();
      if (!string(&m.key)) return false;
      if (!seen.insert(m.key).second) return failAt(m.keyPos, "duplicate key " + quoted(m.key));
      skipSpace();
      if (peek() != ':') return fail("expected ':' after a key");
      ++i_;
      skipSpace();
      if (!value(&m.value, depth + 1)) return false;
      v->members.push_back(std::move(m));
      return true;
    });
  }

  std::string_view s_;
  size_t i_ = 0;
  int line_ = 1;
  size_t lineStart_ = 0;
  std::string err_;
  Pos errPos_;
  size_t values_ = 0;
};

}  // namespace

Status parse(std::string_view text, Value* out) {
  *out = Value();
  Parser p(text);
  return p.document(out);
}

Status readFile(const std::string& path, std::string* text, size_t maxBytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return ARFUSE_FAIL_TEXT(arfuseSystemError, path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const char* kind = S_ISFIFO(st.st_mode)   ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISDIR(st.st_mode)  ? "a directory"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    ::close(fd);
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument,
                            path + ": is " + kind + ", not a regular file: give the path of a JSON file");
  }
  if (static_cast<unsigned long long>(st.st_size) > maxBytes) {
    ::close(fd);
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, path + ": " + std::to_string(st.st_size) +
                                                       " bytes, over the limit of " + std::to_string(maxBytes) +
                                                       " bytes for a file arfuse reads: is it the right file?");
  }
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return ARFUSE_FAIL_TEXT(arfuseSystemError, path + ": read failed: " + std::strerror(e));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > maxBytes) {  // it grew while we read
      ::close(fd);
      return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, path + ": over the limit of " + std::to_string(maxBytes) +
                                                         " bytes for a file arfuse reads");
    }
  }
  ::close(fd);
  *text = std::move(out);
  return Status();
}

void appendString(std::string* out, std::string_view s) {
  out->push_back('"');
  for (char c : s) {
    const size_t k = c == '/' ? std::string_view::npos : kEscapedChars.find(c);
    if (k != std::string_view::npos) {
      out->push_back('\\');
      out->push_back(kEscapeLetters[k]);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      *out += buf;
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

std::string formatDouble(double v) {
  // std::to_chars without a precision gives the shortest form that parses back to the same double,
  // independent of the C locale (printf's "%g" is neither).
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace json
}  // namespace topo
}  // namespace arfuse
