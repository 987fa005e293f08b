// main() of the GPU test executables: skip (exit 77, reason printed) without enough GPUs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) n = 0;
  if (n < ARFUSE_TEST_MIN_GPUS) {
    std::printf("SKIPPED %s: needs %d CUDA GPU(s), found %d (%s). Run scripts/gpu_check.sh on a GPU machine.\n",
                argv[0], ARFUSE_TEST_MIN_GPUS, n, e == cudaSuccess ? "cudaGetDeviceCount ok" : cudaGetErrorString(e));
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
