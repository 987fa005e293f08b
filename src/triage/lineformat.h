// Recognises the prefixes that launchers and loggers put in front of a log message and extracts
// rank, time, level and process from them. Hand-written (no regex): it runs on every line.
//
// Prefixes recognised (they nest, e.g. torchrun's "[default3]:" around a c10d glog line):
//   SGLang      [2026-11-29 10:00:01 TP3] msg            [2026-11-29 10:00:01 DP0 TP3 EP3] msg
//   vLLM        (VllmWorker rank=3 pid=123) msg   (Worker_TP3 pid=9) msg   (EngineCore_0 pid=7) msg
//               INFO 11-29 10:00:01 [gpu_worker.py:123] msg
//   torchrun    [rank5]:msg   [default5]:msg
//   glog / c10d [E1129 10:00:01.123456 4242 ProcessGroupNCCL.cpp:1234] [Rank 5] msg (bracket optional)
//   NCCL        host:pid:tid [3] NCCL WARN msg
//   kernel      [12345.678901] msg   [Sat Nov 29 10:00:01 2026] msg   Nov 29 10:00:01 host kernel: msg
//   ISO stamps  2026-11-29 10:00:01,123 msg   2026-11-29T10:00:01.123+00:00 host kernel: msg
//   arfuse      arfuse ERROR rank=0 ... (body left intact; analyzer parses the tokens)
#pragma once

#include <string_view>

namespace arfuse {
namespace triage {

// A wall-clock stamp as written (no time zone conversion). year 0 = not written (vLLM, glog,
// syslog omit it); the analyzer fills it from other stamps at the end.
struct Stamp {
  int year = 0, month = 0, day = 0;
  double sod = 0;  // seconds of the day
  bool valid() const { return month > 0; }
};

struct LineInfo {
  std::string_view body;        // the message after the recognised prefixes
  int rank = -1;                // from a prefix (TP3, rank=3, [rank3]:, [Rank 3]); -1 unknown
  int dev = -1;                 // NCCL's "[3]" CUDA device index
  std::string_view proc;        // process label when no rank is known (e.g. "EngineCore_0")
  std::string_view ncclStream;  // "host:pid" of an NCCL line (groups WARN with its return chain)
  Stamp stamp;
  double uptime = -1;  // dmesg seconds since boot (not comparable with wall-clock stamps)
  char level = 0;      // 'E', 'W', 'I', 'D', 'F' or 0
  const char* format = "plain";
  bool prefixed = false;  // carried a per-process prefix (so it is not a continuation line)
};

void parseLine(std::string_view line, LineInfo* info);

// Days since 1970-01-01 of a civil date (proleptic Gregorian).
long daysFromCivil(int y, int m, int d);
// Seconds since 1970 for a stamp, with `year` used when the stamp has none.
double stampSeconds(const Stamp& s, int year);

}  // namespace triage
}  // namespace arfuse
