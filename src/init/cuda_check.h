// ARFUSE_CUDA_CHECK for init code: a failed CUDA call returns arfuseCudaError from the enclosing
// function (which returns a Status) with the call and CUDA's error as the message, and starts the
// failure's file:line trail (base/status.h). DeviceScope: the caller's current device, restored.
#pragma once

#include <cuda_runtime.h>

#include "base/status.h"

#define ARFUSE_CUDA_CHECK(call)                                                                              \
  do {                                                                                                       \
    const cudaError_t arfuseCudaError_ = (call);                                                             \
    if (arfuseCudaError_ != cudaSuccess) {                                                                   \
      cudaGetLastError();                                                                                    \
      return ARFUSE_FAIL(arfuseCudaError, "%s failed: %s (%s)", #call, cudaGetErrorString(arfuseCudaError_), \
                         cudaGetErrorName(arfuseCudaError_));                                                \
    }                                                                                                        \
  } while (0)

namespace arfuse {

// Makes `device` current (if >= 0) and restores the caller's current device on scope exit.
struct DeviceScope {
  int saved = -1;
  explicit DeviceScope(int device = -1) {
    cudaGetDevice(&saved);
    if (device >= 0 && saved != device) cudaSetDevice(device);
  }
  ~DeviceScope() {
    int now = -1;
    cudaGetDevice(&now);
    if (saved >= 0 && now != saved) cudaSetDevice(saved);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
};

}  // namespace arfuse
