// Names and texts of the public enums (a path's name is its registry entry's: arfuseAlgoName is
// defined in algos/registry.cc). Host-only, so the CPU-tested pieces can use them too.
#include "arfuse/arfuse.h"
#include "common/enum_arg.h"  // rawEnum: a C caller may pass any int for an enum

using arfuse::rawEnum;

extern "C" {

const char* arfuseGetErrorName(arfuseResult_t r) {
  static const char* names[] = {"arfuseSuccess",     "arfuseInvalidArgument", "arfuseInvalidUsage",
                                "arfuseUnsupported", "arfuseCudaError",       "arfuseNcclError",
                                "arfuseSystemError", "arfuseInternalError",   "arfusePeerTimeout",
                                "arfuseNoDevice",    "arfuseMismatch"};
  const int v = rawEnum(r);
  return (v >= 0 && v < arfuseNumResults) ? names[v] : "arfuseUnknownResult";
}

const char* arfuseGetErrorString(arfuseResult_t r) {
  static const char* text[] = {
      "no error",
      "invalid argument: the message names the argument and what is allowed",
      "invalid usage: the call is not allowed in this state (e.g. destroyed communicator)",
      "unsupported: this build or machine cannot serve the request; the message says why",
      "CUDA error: a CUDA runtime call failed; the message names the call",
      "NCCL error: an NCCL call failed; set NCCL_DEBUG=WARN for details",
      "system error: host allocation or OS failure",
      "internal error: a bug in arfuse; please report it with the log line",
      "peer timeout: a rank waited longer than the timeout for a peer; the group is aborted. Check that every "
      "rank makes the same calls in the same order",
      "no CUDA device is visible",
      "mismatch: ranks made different calls (op, dtype, tokens, hidden or path); the group is aborted. Make every "
      "rank issue the same calls with the same shapes in the same order",
  };
  const int v = rawEnum(r);
  return (v >= 0 && v < arfuseNumResults) ? text[v] : "unknown result code";
}

const char* arfuseDataTypeName(arfuseDataType_t d) {
  static const char* names[] = {"bf16", "fp16", "fp32"};
  const int v = rawEnum(d);
  return (v >= 0 && v < arfuseNumDataTypes) ? names[v] : "unknown";
}

}  // extern "C"
