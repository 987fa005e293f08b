// main() of the GPU test executables: skip (exit 77, reason printed) without enough GPUs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "common/no_device.h"

int main(int argc, char** argv) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) n = 0;
  if (n < ARFUSE_TEST_MIN_GPUS) {
    const std::string why = n == 0 ? arfuse::noDeviceMessage(e, cudaGetErrorString(e)) : "cudaGetDeviceCount ok";
    std::printf("SKIPPED: needs %d CUDA GPU(s), found %d: %s. Run scripts/gpu_check.sh on a GPU machine.\n",
                ARFUSE_TEST_MIN_GPUS, n, why.c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
