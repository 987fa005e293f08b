#include "lineformat.h"

#include <algorithm>
#include <cstring>

namespace arfuse {
namespace triage {

long daysFromCivil(int y, int m, int d) {
  y -= m <= 2;
  const long era = (y >= 0 ? y : y - 399) / 400;
  const long yoe = y - era * 400;
  const long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

double stampSeconds(const Stamp& s, int year) {
  int y = s.year ? s.year : year;
  return static_cast<double>(daysFromCivil(y, s.month, s.day)) * 86400.0 + s.sod;
}

namespace {

inline bool isDigit(char c) { return c >= '0' && c <= '9'; }
inline bool isAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// A tiny cursor over the line.
struct Cur {
  std::string_view s;
  size_t i = 0;
  bool eof() const { return i >= s.size(); }
  char peek(size_t k = 0) const { return i + k < s.size() ? s[i + k] : '\0'; }
  bool lit(std::string_view t) {
    if (s.substr(i, t.size()) == t) {
      i += t.size();
      return true;
    }
    return false;
  }
  // Reads exactly n digits.
  bool digits(int n, int* v) {
    int r = 0;
    for (int k = 0; k < n; ++k) {
      if (!isDigit(peek(k))) return false;
      r = r * 10 + (peek(k) - '0');
    }
    i += n;
    *v = r;
    return true;
  }
  // Reads 1+ digits.
  bool number(long* v) {
    if (!isDigit(peek())) return false;
    long r = 0;
    while (isDigit(peek())) r = r * 10 + (s[i++] - '0');
    *v = r;
    return true;
  }
  void spaces() {
    while (peek() == ' ' || peek() == '\t') ++i;
  }
};

// HH:MM:SS with optional .fff / ,fff
bool parseClock(Cur& c, double* sod) {
  int h, m, sec;
  if (!c.digits(2, &h) || !c.lit(":") || !c.digits(2, &m) || !c.lit(":") || !c.digits(2, &sec)) return false;
  double frac = 0, scale = 0.1;
  if ((c.peek() == '.' || c.peek() == ',') && isDigit(c.peek(1))) {
    ++c.i;
    while (isDigit(c.peek())) {
      frac += (c.s[c.i++] - '0') * scale;
      scale *= 0.1;
    }
  }
  *sod = h * 3600.0 + m * 60.0 + sec + frac;
  return true;
}

// YYYY-MM-DD[ T]HH:MM:SS[.fff][Z|+hh:mm|+hhmm]
bool parseIso(Cur& c, Stamp* st) {
  Cur t = c;
  int y, mo, d;
  if (!t.digits(4, &y) || !t.lit("-") || !t.digits(2, &mo) || !t.lit("-") || !t.digits(2, &d)) return false;
  if (!(t.lit(" ") || t.lit("T") || t.lit("_"))) return false;  // '_' : torchelastic "2026-11-29_10:00:01"
  double sod;
  if (!parseClock(t, &sod)) return false;
  if (t.peek() == 'Z') {
    ++t.i;
  } else if ((t.peek() == '+' || t.peek() == '-') && isDigit(t.peek(1))) {
    ++t.i;
    while (isDigit(t.peek()) || t.peek() == ':') ++t.i;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31) return false;
  st->year = y;
  st->month = mo;
  st->day = d;
  st->sod = sod;
  c = t;
  return true;
}

int monthFromName(std::string_view m) {
  static const char* kNames[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  for (int i = 0; i < 12; ++i)
    if (m == kNames[i]) return i + 1;
  return 0;
}

// "Nov 29 10:00:01" (syslog) -- year unknown.
bool parseSyslogStamp(Cur& c, Stamp* st) {
  Cur t = c;
  int mo = monthFromName(t.s.substr(t.i, 3));
  if (!mo) return false;
  t.i += 3;
  if (!t.lit(" ")) return false;
  t.spaces();
  long d;
  if (!t.number(&d) || !t.lit(" ")) return false;
  double sod;
  if (!parseClock(t, &sod)) return false;
  *st = Stamp{0, mo, static_cast<int>(d), sod};
  c = t;
  return true;
}

// Parses "(... pid=123) " (vLLM process prefix). Extracts rank from "rank=N" or "TPn".
bool parseVllmProc(Cur& c, LineInfo* info) {
  size_t close = c.s.find(')', c.i);
  if (close == std::string_view::npos || close - c.i > 96) return false;
  std::string_view in = c.s.substr(c.i + 1, close - c.i - 1);
  size_t pid = in.find("pid=");
  if (pid == std::string_view::npos) return false;
  size_t r = in.find("rank=");
  int rank = -1;
  if (r != std::string_view::npos && isDigit(in[r + 5 < in.size() ? r + 5 : 0])) {
    rank = 0;
    for (size_t k = r + 5; k < in.size() && isDigit(in[k]); ++k) rank = rank * 10 + (in[k] - '0');
  } else {
    for (size_t k = 0; k + 2 < in.size(); ++k) {
      if (in[k] == 'T' && in[k + 1] == 'P' && isDigit(in[k + 2]) && (k == 0 || !isAlpha(in[k - 1]))) {
        rank = 0;
        for (size_t j = k + 2; j < in.size() && isDigit(in[j]); ++j) rank = rank * 10 + (in[j] - '0');
        break;
      }
    }
  }
  size_t sp = in.find(' ');
  info->proc = in.substr(0, sp == std::string_view::npos ? in.size() : sp);
  if (rank >= 0) info->rank = rank;
  info->prefixed = true;
  info->format = "vllm";
  c.i = close + 1;
  if (c.peek() == ' ') ++c.i;  // one separator only: the body keeps its indentation (traceback frames)
  return true;
}

// "[2026-11-29 10:00:01 DP0 TP3 EP3] " / "[2026-11-29 10:00:01] "
bool parseSglang(Cur& c, LineInfo* info) {
  Cur t = c;
  ++t.i;
  Stamp st;
  if (!parseIso(t, &st)) return false;
  int rank = -1;
  while (t.peek() == ' ') {
    t.spaces();
    if (t.peek() == 'T' && t.peek(1) == 'P' && isDigit(t.peek(2))) {
      t.i += 2;
      long v;
      t.number(&v);
      rank = static_cast<int>(v);
    } else {
      while (!t.eof() && t.peek() != ' ' && t.peek() != ']') ++t.i;
    }
  }
  if (!t.lit("]")) return false;
  if (t.peek() == ' ') ++t.i;
  info->stamp = st;
  if (rank >= 0) {
    info->rank = rank;
    info->prefixed = true;
  } else if (info->rank < 0) {
    info->proc = "main";
    info->prefixed = true;
  }
  info->format = "sglang";
  c = t;
  return true;
}

// "[E1129 10:00:01.123456 4242 ProcessGroupNCCL.cpp:1234] " (bracket optional), then "[Rank 5] " or
// "[PG ID 0 PG GUID 0(default_pg) Rank 5] ".
bool parseGlog(Cur& c, LineInfo* info) {
  Cur t = c;
  bool bracket = t.lit("[");
  char lv = t.peek();
  if (lv != 'E' && lv != 'W' && lv != 'I' && lv != 'F') return false;
  ++t.i;
  int mo, d;
  if (!t.digits(2, &mo) || !t.digits(2, &d) || !t.lit(" ")) return false;
  double sod;
  if (!parseClock(t, &sod)) return false;
  size_t close = t.s.find(']', t.i);
  if (close == std::string_view::npos || close - t.i > 120) return false;
  t.i = close + 1;
  t.spaces();
  (void)bracket;
  info->stamp = Stamp{0, mo, d, sod};
  info->level = lv;
  info->format = "glog";
  if (t.peek() == '[') {
    size_t end = t.s.find(']', t.i);
    if (end != std::string_view::npos && end - t.i < 120) {
      std::string_view in = t.s.substr(t.i, end - t.i);
      size_t r = in.find("Rank ");
      if (r != std::string_view::npos && r + 5 < in.size() && isDigit(in[r + 5])) {
        int rank = 0;
        for (size_t k = r + 5; k < in.size() && isDigit(in[k]); ++k) rank = rank * 10 + (in[k] - '0');
        info->rank = rank;
        info->prefixed = true;
      }
    }
  }
  c = t;
  return true;
}

// "host:pid:tid [3] NCCL WARN msg", newer NCCL's "host:pid:tid [3] file.cc:123 NCCL WARN msg", and
// "[3] file.h:28 NCCL WARN msg" when a launcher dropped the host part -> body starts at "NCCL".
bool parseNcclAfterHost(Cur& t, LineInfo* info) {
  long dev;
  if (!t.lit("[") || !t.number(&dev) || !t.lit("] ")) return false;
  bool old = false;  // NCCL <= 2.3 printed "[dev] site WARN msg" / "[dev] INFO msg", without the word NCCL
  if (!t.lit("NCCL ")) {
    size_t sp = t.s.find(' ', t.i);
    if (sp != std::string_view::npos && sp - t.i <= 80 && t.s.compare(sp + 1, 5, "NCCL ") == 0 &&
        t.s.substr(t.i, sp - t.i).find(':') != std::string_view::npos) {
      t.i = sp + 6;
    } else if (t.s.compare(t.i, 5, "WARN ") == 0 || t.s.compare(t.i, 5, "INFO ") == 0) {
      old = true;
    } else if (sp != std::string_view::npos && sp - t.i <= 80 &&
               t.s.substr(t.i, sp - t.i).find(':') != std::string_view::npos &&
               (t.s.compare(sp + 1, 5, "WARN ") == 0 || t.s.compare(sp + 1, 5, "INFO ") == 0)) {
      t.i = sp + 1;
      old = true;
    } else {
      return false;
    }
  }
  if (old) {
    info->dev = static_cast<int>(std::min(dev, 1L << 30));
    info->format = "nccl";
    info->level = t.s[t.i] == 'W' ? 'W' : 'I';
    return true;  // the body keeps "WARN msg"
  }
  info->dev = static_cast<int>(std::min(dev, 1L << 30));
  info->format = "nccl";
  if (t.s.substr(t.i, 4) == "WARN")
    info->level = 'W';
  else if (t.s.substr(t.i, 4) == "INFO")
    info->level = 'I';
  t.i -= 5;  // keep "NCCL " in the body
  return true;
}

bool parseNccl(Cur& c, LineInfo* info) {
  std::string_view rest = c.s.substr(c.i);
  size_t sp = rest.find(' ');
  if (sp == std::string_view::npos || sp > 80) return false;
  std::string_view tok = rest.substr(0, sp);
  size_t c2 = tok.rfind(':');
  if (c2 == std::string_view::npos || c2 == 0) return false;
  size_t c1 = tok.rfind(':', c2 - 1);
  if (c1 == std::string_view::npos) return false;
  Cur t = c;
  t.i += sp + 1;
  if (!parseNcclAfterHost(t, info)) return false;
  info->ncclStream = tok.substr(0, c2);
  c.i = t.i;
  if (!info->prefixed && info->rank < 0) info->proc = info->ncclStream;
  return true;
}

// vLLM logger: "INFO 11-29 10:00:01 [file.py:123] ", newer "INFO [file.py:123] " (no stamp), and the
// severity column of cloud-logging exports: "ERROR 2025-04-05T00:01:19.509514570Z ". One space after
// the prefix is consumed, not more: a traceback printed through the logger keeps its indentation.
bool parseVllmLogger(Cur& c, LineInfo* info) {
  static const struct {
    const char* word;
    char level;
  } kLevels[] = {{"DEBUG ", 'D'},    {"INFO ", 'I'},   {"WARNING ", 'W'}, {"WARN ", 'W'},  {"ERROR ", 'E'},
                 {"CRITICAL ", 'F'}, {"NOTICE ", 'I'}, {"DEFAULT ", 'I'}, {"ALERT ", 'F'}, {"EMERGENCY ", 'F'}};
  const char first = c.peek();
  if (first != 'D' && first != 'I' && first != 'W' && first != 'E' && first != 'C' && first != 'N' && first != 'A')
    return false;
  for (const auto& l : kLevels) {
    Cur t = c;
    if (l.word[0] != first || !t.lit(l.word)) continue;
    Stamp st;
    if (isDigit(t.peek()) && t.peek(4) == '-' && parseIso(t, &st)) {  // cloud logging: SEVERITY ISO-8601
      if (t.peek() == ' ') ++t.i;
      info->stamp = st;
      info->level = l.level;
      info->format = "cloud";
      c = t;
      return true;
    }
    bool stamped = false;
    int mo = 0, d = 0;
    double sod = 0;
    if (isDigit(t.peek())) {
      if (!t.digits(2, &mo) || !t.lit("-") || !t.digits(2, &d) || !t.lit(" ")) return false;
      if (!parseClock(t, &sod)) return false;
      stamped = true;
      t.spaces();
    }
    if (t.peek() == '[') {
      size_t close = t.s.find(']', t.i);
      if (close == std::string_view::npos || close - t.i >= 80) return false;
      t.i = close + 1;
    } else if (stamped) {
      // older vLLM: "ERROR 06-06 14:09:57 worker_base.py:148] msg"
      size_t close = t.s.find("] ", t.i);
      size_t sp = t.s.find(' ', t.i);
      if (close != std::string_view::npos && close - t.i < 80 && sp == close + 1) t.i = close + 1;
    } else {
      return false;  // "INFO " alone is an ordinary word, not a logger prefix
    }
    if (t.peek() == ' ') ++t.i;
    if (stamped) info->stamp = Stamp{0, mo, d, sod};
    info->level = l.level;
    info->format = "vllm";
    c = t;
    return true;
  }
  return false;
}

// Python logging after its stamp: "- name - LEVEL - " (the default format of many launchers).
void parsePythonLogging(Cur& c, LineInfo* info) {
  Cur t = c;
  if (!t.lit("- ")) return;
  size_t dash = t.s.find(" - ", t.i);
  if (dash == std::string_view::npos || dash - t.i > 80) {
    c = t;
    return;
  }
  Cur u = t;
  u.i = dash + 3;
  static const char* kLv[] = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"};
  for (const char* lv : kLv) {
    Cur w = u;
    if (w.lit(lv) && w.lit(" - ")) {
      info->level = lv[0] == 'C' ? 'F' : lv[0];
      c = w;
      return;
    }
  }
  c = t;
}

// A level word in upper case at the cursor ("ERROR", "WARNING", ...): its level letter and length, or 0.
size_t upperLevel(const Cur& c, char* level) {
  static const struct {
    std::string_view word;
    char level;
  } kWords[] = {{"CRITICAL", 'F'}, {"WARNING", 'W'}, {"ERROR", 'E'}, {"FATAL", 'F'},
                {"DEBUG", 'D'},    {"TRACE", 'D'},   {"WARN", 'W'},  {"INFO", 'I'}};
  const char first = c.peek();
  if (first < 'C' || first > 'W') return 0;
  for (const auto& w : kWords) {
    const size_t n = w.word.size();
    if (w.word[0] == first && c.s.compare(c.i, n, w.word) == 0 && !isAlpha(c.peek(n))) {
      *level = w.level;
      return n;
    }
  }
  return 0;
}

// After an ISO stamp: "| ERROR | stderr | msg" (FastChat), "| ERROR    | mod:fn:12 - msg" (loguru), or a
// plain level column "ERROR name: msg" (many Go / Rust / Python loggers). One separator is consumed.
void parseStampedLevel(Cur& t, LineInfo* info) {
  char lv = 0;
  if (t.peek() == '|' && t.peek(1) == ' ') {
    Cur u = t;
    u.i += 2;
    const size_t n = upperLevel(u, &lv);
    if (n == 0) return;
    u.i += n;
    u.spaces();
    if (!u.lit("|")) return;
    u.spaces();
    // the next column is the logger's name: "stderr |" or "module:fn:12 - "
    size_t bar = u.s.find(" | ", u.i), dash = u.s.find(" - ", u.i), sp = u.s.find(' ', u.i);
    if (bar != std::string_view::npos && bar == sp && bar - u.i < 64)
      u.i = bar + 3;
    else if (dash != std::string_view::npos && dash == sp && dash - u.i < 96)
      u.i = dash + 3;
    info->level = lv;
    t = u;
    return;
  }
  const size_t n = upperLevel(t, &lv);
  if (n > 0 && t.peek(n) == ' ') {
    info->level = lv;
    t.i += n;
    t.spaces();
  }
}

// "ERROR:    msg" (uvicorn), "ERROR:root:msg" / "WARNING:vllm.engine:msg" (Python logging's default format).
bool parseColonLevel(Cur& c, LineInfo* info) {
  char lv = 0;
  const size_t n = upperLevel(c, &lv);
  if (n == 0 || c.peek(n) != ':') return false;
  Cur t = c;
  t.i += n + 1;
  if (t.peek() == ' ') {
    t.spaces();
  } else {
    size_t colon = t.s.find(':', t.i), sp = t.s.find(' ', t.i);
    if (colon == std::string_view::npos || colon - t.i > 80 || (sp != std::string_view::npos && sp < colon))
      return false;
    t.i = colon + 1;
  }
  info->level = lv;
  if (std::strcmp(info->format, "plain") == 0) info->format = "python";
  c = t;
  return true;
}

// "[1,3]<stdout>:" (mpirun --tag-output): job 1, rank 3.
bool parseMpiTag(Cur& c, LineInfo* info) {
  Cur t = c;
  long job, rank;
  if (!t.lit("[") || !t.number(&job) || !t.lit(",") || !t.number(&rank) || !t.lit("]")) return false;
  if (!(t.lit("<stdout>:") || t.lit("<stderr>:") || t.lit(":"))) return false;
  info->rank = static_cast<int>(std::min(rank, 1L << 30));
  info->prefixed = true;
  if (std::strcmp(info->format, "plain") == 0) info->format = "mpi";
  c = t;
  return true;
}

// "service-1  | " (docker compose): a name, at least one space, a bar, a space.
bool parseCompose(Cur& c, LineInfo* info) {
  size_t k = c.i;
  while (k < c.s.size() && (isAlpha(c.s[k]) || isDigit(c.s[k]) || c.s[k] == '_' || c.s[k] == '-' || c.s[k] == '.')) ++k;
  if (k == c.i || k - c.i > 64 || k >= c.s.size() || c.s[k] != ' ') return false;
  size_t b = k;
  while (b < c.s.size() && c.s[b] == ' ') ++b;
  if (b >= c.s.size() || c.s[b] != '|' || (b + 1 < c.s.size() && c.s[b + 1] != ' ')) return false;
  if (!info->prefixed) info->proc = c.s.substr(c.i, k - c.i);
  c.i = std::min(b + 2, c.s.size());
  return true;
}

// One prefix at the cursor; returns false when none is recognised.
bool stripOne(Cur& c, LineInfo* info) {
  char ch = c.peek();
  if (ch == '>' && c.peek(1) == ' ' && c.i == 0) {  // a log quoted in Markdown ("> line")
    c.i += 2;
    return true;
  }
  if (ch == '[') {
    if (isDigit(c.peek(1)) && parseMpiTag(c, info)) return true;
    {
      Cur t = c;
      if (parseNcclAfterHost(t, info)) {  // "[3] file.h:28 NCCL WARN ..." without host:pid:tid
        c = t;
        return true;
      }
    }
    // torchrun "[rank5]:" / "[default5]:"
    size_t k = c.i + 1;
    while (k < c.s.size() && isAlpha(c.s[k])) ++k;
    size_t digitsAt = k;
    while (k < c.s.size() && isDigit(c.s[k])) ++k;
    if (k > digitsAt && digitsAt > c.i + 1 && k + 1 < c.s.size() + 1 && c.s.substr(k, 2) == "]:") {
      int rank = 0;
      for (size_t j = digitsAt; j < k; ++j) rank = rank * 10 + (c.s[j] - '0');
      info->rank = rank;
      info->prefixed = true;
      if (std::strcmp(info->format, "plain") == 0) info->format = "torchrun";
      c.i = k + 2;
      return true;
    }
    if (isDigit(c.peek(1)) && parseSglang(c, info)) return true;
    if (parseGlog(c, info)) return true;
    // dmesg "[ 12345.678901] "
    {
      Cur t = c;
      ++t.i;
      t.spaces();
      long sec;
      if (t.number(&sec) && t.lit(".")) {
        long frac;
        size_t f0 = t.i;
        if (t.number(&frac) && t.lit("]")) {
          double scale = 1;
          for (size_t j = f0; j < t.i - 1; ++j) scale *= 10;
          info->uptime = static_cast<double>(sec) + static_cast<double>(frac) / scale;
          if (std::strcmp(info->format, "plain") == 0) info->format = "dmesg";
          t.spaces();
          c = t;
          return true;
        }
      }
    }
    // dmesg -T "[Sat Nov 29 10:00:01 2026] "
    if (c.s.size() > c.i + 26 && isAlpha(c.peek(1)) && c.peek(4) == ' ') {
      Cur t = c;
      t.i += 5;
      Stamp st;
      long y;
      if (parseSyslogStamp(t, &st) && t.lit(" ") && t.number(&y) && t.lit("]")) {
        st.year = static_cast<int>(y);
        info->stamp = st;
        info->format = "dmesg";
        t.spaces();
        c = t;
        return true;
      }
    }
    // TensorRT's logger "[02/20/2024-10:56:21] " (MM/DD/YYYY-HH:MM:SS)
    if (isDigit(c.peek(1)) && c.peek(3) == '/') {
      Cur t = c;
      ++t.i;
      int mo, d, y;
      double sod;
      if (t.digits(2, &mo) && t.lit("/") && t.digits(2, &d) && t.lit("/") && t.digits(4, &y) && t.lit("-") &&
          parseClock(t, &sod) && t.lit("]") && mo >= 1 && mo <= 12 && d >= 1 && d <= 31) {
        info->stamp = Stamp{y, mo, d, sod};
        if (std::strcmp(info->format, "plain") == 0) info->format = "trt";
        t.spaces();
        c = t;
        return true;
      }
    }
    return false;
  }
  if (ch == '(') return parseVllmProc(c, info);
  if (isDigit(ch)) {
    Stamp st;
    Cur t = c;
    if (!parseIso(t, &st)) return parseNccl(c, info);  // a host name may start with a digit (container ids)
    info->stamp = st;
    t.spaces();
    // journalctl / syslog with ISO stamps: "host kernel: "
    size_t k = t.s.find(' ', t.i);
    if (k != std::string_view::npos && t.s.substr(k, 9) == " kernel: ") {
      t.i = k + 9;
      info->format = "syslog";
    } else if (t.peek() == '-' && t.peek(1) == ' ') {
      // python logging "2026-11-29 10:00:01,123 - name - LEVEL - msg"
      parsePythonLogging(t, info);
      info->format = "python";
    } else {
      parseStampedLevel(t, info);
    }
    c = t;
    return true;
  }
  if (isAlpha(ch)) {
    if (c.s.compare(c.i, 7, "arfuse ") == 0) return false;  // arfuse's own grammar: leave intact
    if (parseVllmLogger(c, info)) return true;
    if (parseColonLevel(c, info)) return true;
    if ((ch == 'E' || ch == 'W' || ch == 'I' || ch == 'F') && isDigit(c.peek(1)) && parseGlog(c, info)) return true;
    {
      Cur t = c;
      Stamp st;
      if (parseSyslogStamp(t, &st)) {
        t.spaces();
        // "host kernel: msg" or "host ident[pid]: msg" (journalctl, rsyslog)
        size_t k = t.s.find(' ', t.i);
        if (k != std::string_view::npos && k - t.i < 64) {
          size_t colon = t.s.find(": ", k + 1);
          size_t space = t.s.find(' ', k + 1);
          if (colon != std::string_view::npos && colon - k < 80 && (space == std::string_view::npos || space >= colon))
            t.i = colon + 2;
        }
        info->stamp = st;
        info->format = "syslog";
        c = t;
        return true;
      }
    }
    if (parseNccl(c, info)) return true;
    return parseCompose(c, info);
  }
  return false;
}

}  // namespace

void parseLine(std::string_view line, LineInfo* info) {
  *info = LineInfo();
  Cur c{line, 0};
  for (int n = 0; n < 5 && !c.eof(); ++n) {
    if (!stripOne(c, info)) break;
  }
  info->body = line.substr(c.i < line.size() ? c.i : line.size());
  // arfuse's own lines, also when a tool or a launcher indents them (`arfuse selftest --procs`
  // prints each rank's log two spaces in): the level word must follow, so an indented line that
  // merely starts with the word (a traceback's source line) stays as it is.
  size_t indent = 0;
  while (indent < info->body.size() && (info->body[indent] == ' ' || info->body[indent] == '\t')) ++indent;
  if (indent > 0 && info->body.size() > indent + 7 && info->body.compare(indent, 7, "arfuse ") == 0) {
    const std::string_view lv = info->body.substr(indent + 7, 6);
    if (lv == "ERROR " || lv.substr(0, 5) == "WARN " || lv.substr(0, 5) == "INFO " || lv == "DEBUG ")
      info->body.remove_prefix(indent);
  }
  if (info->body.size() > 7 && info->body.compare(0, 7, "arfuse ") == 0) {
    std::string_view lv = info->body.substr(7, 5);
    if (lv.substr(0, 5) == "ERROR")
      info->level = 'E';
    else if (lv.substr(0, 4) == "WARN")
      info->level = 'W';
    else if (lv.substr(0, 4) == "INFO")
      info->level = 'I';
    else if (lv.substr(0, 5) == "DEBUG")
      info->level = 'D';
    if (info->level) info->format = "arfuse";
  }
}

}  // namespace triage
}  // namespace arfuse
