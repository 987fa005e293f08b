// ARFUSE_CUDA_CHECK for init code: a failed CUDA call returns arfuseCudaError from the enclosing
// function (which returns a Status) with the call and CUDA's error as the message, and starts the
// failure's file:line trail (core/status.h).
#pragma once

#include <cuda_runtime.h>

#include "core/status.h"

#define ARFUSE_CUDA_CHECK(call)                                                                              \
  do {                                                                                                       \
    const cudaError_t arfuseCudaError_ = (call);                                                             \
    if (arfuseCudaError_ != cudaSuccess) {                                                                   \
      cudaGetLastError();                                                                                    \
      return ARFUSE_FAIL(arfuseCudaError, "%s failed: %s (%s)", #call, cudaGetErrorString(arfuseCudaError_), \
                         cudaGetErrorName(arfuseCudaError_));                                                \
    }                                                                                                        \
  } while (0)
