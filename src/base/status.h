// Status: the one error currency inside the library (the C ABI's is arfuseResult_t + the
// communicator's last-error text). A failure carries its code, the message the user reads (what
// failed and what to do next), and the trail of frames it went through: every frame that passes a
// failure on with ARFUSE_CHECK appends its file:line and logs `file:line -> code` at DEBUG level, as
// NCCL's NCCLCHECK does, so ARFUSE_LOG_LEVEL=DEBUG prints a backtrace for free.
//
// Header-only, on the standard library and include/arfuse/arfuse.h alone, so that every layer
// returns it: the rendezvous, triage and topology libraries too, which link no log. The DEBUG line
// of each frame therefore goes through a sink (setStatusTrailSink) that common/log.cc installs;
// where nothing installed one (a fuzz target of the rendezvous alone) the trail is still kept.
//
//   Status allocate(...) {
//     ARFUSE_CUDA_CHECK(cudaMalloc(&p, bytes));          // init/cuda_check.h: arfuseCudaError + CUDA's text
//     if (!fits) return ARFUSE_FAIL(arfuseUnsupported, "device %d cannot map host memory", d);
//     return Status();
//   }
//   Status build(...) { ARFUSE_CHECK(allocate(...)); ... }
//   arfuseResult_t createX(..., std::string* message) { return build(...).into(message); }  // the boundary
#pragma once

#include <atomic>
#include <cstring>
#include <string>
#include <utility>

#include "arfuse/arfuse.h"
#include "base/strprintf.h"

namespace arfuse {

// Where each frame of a failure goes at DEBUG level (`file:line -> code`): common/log.cc installs
// the log line when the library loads. nullptr: not printed.
using StatusTrailSink = void (*)(const char* file, int line, arfuseResult_t code);
inline std::atomic<StatusTrailSink>& statusTrailSink() {
  static std::atomic<StatusTrailSink> sink{nullptr};
  return sink;
}
inline void setStatusTrailSink(StatusTrailSink s) { statusTrailSink().store(s, std::memory_order_release); }

class Status {
 public:
  Status() = default;  // success
  Status(arfuseResult_t code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == arfuseSuccess; }
  arfuseResult_t code() const { return code_; }
  const std::string& message() const { return message_; }
  // "group_builder.cc:41 <- comm.cc:380": where the failure was raised, then each frame that passed it on.
  const std::string& trail() const { return trail_; }
  // The frame that raised the failure (the trail's first), for a log line placed where it happened;
  // "" / 0 before any.
  const char* file() const { return file_; }
  int line() const { return line_; }

  // Appends file:line to the trail and hands `file:line -> code` to the sink (a DEBUG log line).
  Status& through(const char* file, int line) {
    const char* slash = std::strrchr(file, '/');
    const std::string here = strprintf("%s:%d", slash ? slash + 1 : file, line);
    if (trail_.empty()) {
      file_ = file;
      line_ = line;
    }
    trail_ = trail_.empty() ? here : trail_ + " <- " + here;
    if (StatusTrailSink sink = statusTrailSink().load(std::memory_order_acquire)) sink(file, line, code_);
    return *this;
  }
  // Puts `prefix` before the message (the entry point's name, added where it is known).
  Status& prefixed(const std::string& prefix) {
    message_ = prefix + message_;
    return *this;
  }
  // At a boundary that speaks arfuseResult_t: the code, with the message into *message on failure.
  arfuseResult_t into(std::string* message) const {
    if (!ok() && message) *message = message_;
    return code_;
  }

 private:
  arfuseResult_t code_ = arfuseSuccess;
  std::string message_;
  std::string trail_;
  const char* file_ = "";
  int line_ = 0;
};

}  // namespace arfuse

// A failure raised here: the code and a printf-style message, the trail started at this line.
#define ARFUSE_FAIL(code, ...) (::arfuse::Status((code), ::arfuse::strprintf(__VA_ARGS__)).through(__FILE__, __LINE__))

// The same for a message already built as a std::string (the rendezvous builds its sentences so).
#define ARFUSE_FAIL_TEXT(code, text) (::arfuse::Status((code), (text)).through(__FILE__, __LINE__))

// Passes a failed Status on with `prefix` (the entry point's "arfuseFoo: ") before its message, for
// the checks that do not know which entry point they serve (api/validate.h); the line is this one.
#define ARFUSE_CHECK_PREFIXED(prefix, expr)                                                     \
  do {                                                                                          \
    ::arfuse::Status arfuseStatus_ = (expr);                                                    \
    if (!arfuseStatus_.ok()) return arfuseStatus_.prefixed(prefix).through(__FILE__, __LINE__); \
  } while (0)

// Passes a failed Status on to the caller, adding this frame to its trail.
#define ARFUSE_CHECK(expr)                                                     \
  do {                                                                         \
    ::arfuse::Status arfuseStatus_ = (expr);                                   \
    if (!arfuseStatus_.ok()) return arfuseStatus_.through(__FILE__, __LINE__); \
  } while (0)
