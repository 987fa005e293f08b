// CUDA_TRY for init code: a failed CUDA call returns arfuseCudaError from the enclosing function
// with *message naming the call and CUDA's error (the enclosing function has `std::string* message`).
#pragma once

#include <cuda_runtime.h>

#include "diag/log.h"

#define CUDA_TRY(call)                                                                                           \
  do {                                                                                                           \
    cudaError_t e_ = (call);                                                                                     \
    if (e_ != cudaSuccess) {                                                                                     \
      *message = ::arfuse::strprintf("%s failed: %s (%s)", #call, cudaGetErrorString(e_), cudaGetErrorName(e_)); \
      cudaGetLastError();                                                                                        \
      return arfuseCudaError;                                                                                    \
    }                                                                                                            \
  } while (0)
