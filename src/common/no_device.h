// Why CUDA sees no device, in words a newcomer can act on. On a machine with no NVIDIA driver at
// all, the CUDA runtime answers cudaGetDeviceCount with cudaErrorInsufficientDriver, "CUDA driver
// version is insufficient for CUDA runtime version", which sends people off to upgrade a driver they
// do not have. Header-only and CUDA-free (the caller passes CUDA's error), so the library, the CLI
// and the test mains all say the same sentence.
#pragma once

#include <dlfcn.h>
#include <sys/stat.h>

#include <string>

namespace arfuse {

// "" when the driver's user-space library libcuda.so.1 can be loaded (a driver is there, whatever
// else went wrong); otherwise why not, starting "no NVIDIA driver is loaded".
inline std::string noDriverReason() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (!h) h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h) {
    dlclose(h);
    return "";
  }
  struct stat st;
  if (stat("/proc/driver/nvidia/version", &st) == 0)
    return "no NVIDIA driver is loaded: the kernel module is, but its library libcuda.so.1 cannot be loaded (install "
           "the driver's user-space libraries, or in a container run with the NVIDIA container toolkit)";
  return "no NVIDIA driver is loaded: neither libcuda.so.1 nor /proc/driver/nvidia exists, so this machine has no "
         "NVIDIA GPU or no driver installed";
}

// Why cudaGetDeviceCount gave no device: cudaError is its result (0: it succeeded and found none),
// cudaText CUDA's string for it.
inline std::string noDeviceCause(int cudaError, const char* cudaText) {
  std::string why = noDriverReason();
  if (!why.empty()) return why;
  if (cudaError == 0) return "cudaGetDeviceCount found 0 devices; check CUDA_VISIBLE_DEVICES";
  return std::string("cudaGetDeviceCount: ") + (cudaText ? cudaText : "?");
}

// The one sentence for "no device", where e.g. " to this process".
inline std::string noDeviceMessage(int cudaError, const char* cudaText, const char* where = "") {
  return std::string("no CUDA device is visible") + where + " (" + noDeviceCause(cudaError, cudaText) + ")";
}

}  // namespace arfuse
