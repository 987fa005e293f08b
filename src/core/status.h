// Status: the one error currency inside the library (the C ABI's is arfuseResult_t + the
// communicator's last-error text). A failure carries its code, the message the user reads (what
// failed and what to do next), and the trail of frames it went through: every frame that passes a
// failure on with ARFUSE_CHECK appends its file:line and logs `file:line -> code` at DEBUG level, as
// NCCL's NCCLCHECK does, so ARFUSE_LOG_LEVEL=DEBUG prints a backtrace for free.
//
//   Status allocate(...) {
//     ARFUSE_CUDA_CHECK(cudaMalloc(&p, bytes));          // init/cuda_check.h: arfuseCudaError + CUDA's text
//     if (!fits) return ARFUSE_FAIL(arfuseUnsupported, "device %d cannot map host memory", d);
//     return Status();
//   }
//   Status build(...) { ARFUSE_CHECK(allocate(...)); ... }
//   arfuseResult_t createX(..., std::string* message) { return build(...).into(message); }  // the boundary
#pragma once

#include <string>
#include <utility>

#include "arfuse/arfuse.h"
#include "common/log.h"

namespace arfuse {

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

  // Appends file:line to the trail and logs `file:line -> code` at DEBUG.
  Status& through(const char* file, int line);
  // Puts `prefix` before the message (the entry point's name, added where it is known).
  Status& prefixed(const std::string& prefix) {
    message_ = prefix + message_;
    return *this;
  }
  // At a boundary that speaks arfuseResult_t: the code, with the message into *message on failure.
  arfuseResult_t into(std::string* message) const;

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
