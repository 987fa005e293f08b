// What the GPU tests that build their own groups share: the GPU of each rank (virtual ranks on GPU
// 0 in gpu_test, rank r on GPU r % count in multigpu_test: ARFUSE_TEST_MIN_GPUS), a group created
// on those GPUs, and a wall-clock helper for the timing checks.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <vector>

#include "arfuse/arfuse.h"

namespace arfuse {
namespace gpufixture {

using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The GPU of rank r: 0 for virtual ranks (gpu_test), r modulo the GPU count for multigpu_test.
inline int rankDevice(int r) {
#if ARFUSE_TEST_MIN_GPUS >= 2
  int ngpu = 1;
  cudaGetDeviceCount(&ngpu);
  return r % ngpu;
#else
  (void)r;
  return 0;
#endif
}

inline std::vector<int> rankDevices(int n) {
  std::vector<int> devs(n);
  for (int r = 0; r < n; ++r) devs[r] = rankDevice(r);
  return devs;
}

// arfuseCommInitAll of comms->size() ranks on rankDevices(), with `cfg`.
inline arfuseResult_t initOnRankDevices(std::vector<arfuseComm_t>* comms, const arfuseConfig_t& cfg) {
  const std::vector<int> devs = rankDevices(static_cast<int>(comms->size()));
  return arfuseCommInitAll(comms->data(), static_cast<int>(comms->size()), devs.data(), &cfg);
}

}  // namespace gpufixture
}  // namespace arfuse
