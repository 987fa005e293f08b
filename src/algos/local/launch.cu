// Instantiations of the single-GPU add+RMSNorm kernel, and its launch; also the residency query over
// every multi-rank path and the init-time peer-access proof kernels.
#include "algos/launch_impl.cuh"
#include "algos/local/kernel.cuh"

namespace arfuse {
namespace {

using LocalFn = void (*)(LocalArgs);

template <typename T>
struct PickLocal {
  static LocalFn get(KernelKind kind, int vecs) {
    if (kind == kKindExtended)
      return vecs == 2 ? addRmsNormKernel<T, 2, true> : vecs == 8 ? addRmsNormKernel<T, 8, true> : nullptr;
    if (kind == kKindAllReduce) return sumSourcesKernel<T>;
    if (kind != kKindFused) return nullptr;
    switch (vecs) {
      case 1:
        return addRmsNormKernel<T, 1>;
      case 2:
        return addRmsNormKernel<T, 2>;
      case 4:
        return addRmsNormKernel<T, 4>;
      case 8:
        return addRmsNormKernel<T, 8>;
      default:
        return nullptr;
    }
  }
};

__device__ __forceinline__ uint32_t proofWord(uint32_t seed, size_t i) {
  return (seed * 2654435761u) ^ static_cast<uint32_t>(i * 40503u + 1u);
}
__global__ void proofStoreKernel(uint32_t* dst, size_t words, uint32_t seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += gridDim.x * blockDim.x)
    reinterpret_cast<volatile uint32_t*>(dst)[i] = proofWord(seed, i);
}
__global__ void proofCheckKernel(const uint32_t* src, size_t words, uint32_t seed, unsigned* wrong) {
  unsigned bad = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += gridDim.x * blockDim.x)
    bad += reinterpret_cast<const volatile uint32_t*>(src)[i] != proofWord(seed, i);
  if (bad) atomicAdd(wrong, bad);
}

}  // namespace

int launchLocal(const Launch& l, const LocalArgs& args, cudaStream_t stream) {
  return launchKernel(pickByDtype<PickLocal>(l.dtype, l.kind, l.vecs), l, args, stream);
}

int launchProofStore(void* dst, size_t words, uint32_t seed) {
  proofStoreKernel<<<8, 256>>>(static_cast<uint32_t*>(dst), words, seed);
  return static_cast<int>(cudaGetLastError());
}
int launchProofCheck(const void* src, size_t words, uint32_t seed, unsigned* wrong) {
  proofCheckKernel<<<8, 256>>>(static_cast<const uint32_t*>(src), words, seed, wrong);
  return static_cast<int>(cudaGetLastError());
}

Residency measureResidency() {
  Residency r;
  for (int c = 2; c <= kMaxChunks; c *= 2) r.clusters[c] = 1 << 20;
  residencyLowLatency(&r);
  residencyOneShot(&r);
  residencyTwoShot(&r);
  residencyHostStaged(&r);
  int major = 0, device = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  for (int c = 2; c <= kMaxChunks; c *= 2)
    if (major < 9 || r.clusters[c] >= (1 << 20)) r.clusters[c] = 0;  // no clusters before sm_90
  return r;
}

}  // namespace arfuse
