// What the GPU tests that build their own groups share: the GPU of each rank (virtual ranks on GPU
// 0 in gpu_test, rank r on GPU r % count in multigpu_test: ARFUSE_TEST_MIN_GPUS), a group created
// on those GPUs (CommGroup), with one stream per rank (RankGroup), from a test config (testConfig),
// and a wall-clock helper for the timing checks.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <utility>
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

// A config for a test group: the workspace for maxTokens x maxHidden of `dtypeMask`, `algo` forced
// (-1: the plan's), waits bounded at timeoutMs (-1: the default).
inline arfuseConfig_t testConfig(int maxTokens, int maxHidden, int algo = -1, int timeoutMs = -1,
                                 unsigned dtypeMask = ARFUSE_DTYPE_ALL) {
  arfuseConfig_t cfg = ARFUSE_CONFIG_INITIALIZER;
  cfg.maxTokens = maxTokens;
  cfg.maxHidden = maxHidden;
  cfg.dtypeMask = dtypeMask;
  cfg.algo = algo;
  cfg.timeoutMs = timeoutMs;
  return cfg;
}

// n communicators of one arfuseCommInitAll group on `devices` (create; again after destroyComms),
// without streams of their own: for the tests whose streams are shared by several groups
// (multigpu_test's chains) or are what the test varies (streams_test). The caller waits for its
// streams before the communicators go (destroyComms, or the destructor).
struct CommGroup {
  int n;
  std::vector<int> devices;
  std::vector<arfuseComm_t> comms;
  arfuseResult_t init = arfuseInternalError;  // create's result; arfuseInternalError before it and after destroy

  explicit CommGroup(std::vector<int> devs) : n(static_cast<int>(devs.size())), devices(std::move(devs)), comms(n) {}
  CommGroup(const CommGroup&) = delete;
  CommGroup& operator=(const CommGroup&) = delete;
  ~CommGroup() { destroyComms(); }

  arfuseResult_t create(const arfuseConfig_t& cfg) {
    init = arfuseCommInitAll(comms.data(), n, devices.data(), &cfg);
    return init;
  }
  void destroyComms() {
    if (init == arfuseSuccess)
      for (arfuseComm_t c : comms) arfuseCommDestroy(c);
    init = arfuseInternalError;
  }
};

// A CommGroup with one non-blocking stream per rank on its device, made once and kept across
// create/destroy. destroy() waits for every stream, then destroys the communicators: a test that
// owns buffers its calls use calls it before freeing them (or declares the group after them). The
// destructor destroys what is left, then the streams.
struct RankGroup : CommGroup {
  std::vector<cudaStream_t> streams;

  explicit RankGroup(std::vector<int> devs) : CommGroup(std::move(devs)), streams(n) {
    for (int r = 0; r < n; ++r) {
      cudaSetDevice(devices[r]);
      cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking);
    }
    cudaSetDevice(devices[0]);
  }
  explicit RankGroup(int nranks) : RankGroup(rankDevices(nranks)) {}
  ~RankGroup() {
    destroy();
    for (cudaStream_t s : streams) cudaStreamDestroy(s);
  }

  void destroy() {
    for (cudaStream_t s : streams) cudaStreamSynchronize(s);
    destroyComms();
  }
};

}  // namespace gpufixture
}  // namespace arfuse
