// One 16-byte access worth of elements (8 x bf16/fp16, 4 x fp32), converted to and from fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

namespace arfuse {

template <typename T>
struct Vec;

template <>
struct Vec<float> {
  static constexpr int kElems = 4;
  static constexpr uint32_t kNanWord = 0x7FC00000u;  // one quiet NaN per 32-bit word
  __device__ static void toFloat(const uint4& v, float* f) {
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
  }
  __device__ static uint4 fromFloat(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
  }
};

template <typename H, typename H2, uint32_t kNan2>
struct HalfVec {
  static constexpr int kElems = 8;
  static constexpr uint32_t kNanWord = kNan2;  // two quiet NaNs per 32-bit word
  __device__ static void toFloat(const uint4& v, float* f) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      H2 h = *reinterpret_cast<const H2*>(&w[i]);
      f[2 * i] = toF(h.x);
      f[2 * i + 1] = toF(h.y);
    }
  }
  __device__ static uint4 fromFloat(const float* f) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      H2 h;
      h.x = fromF(f[2 * i]);
      h.y = fromF(f[2 * i + 1]);
      w[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
  // The element conversions, round to nearest even (fp16 or bf16 by H).
  __device__ static float toF(H h) {
    if constexpr (std::is_same_v<H, __half>)
      return __half2float(h);
    else
      return __bfloat162float(h);
  }
  __device__ static H fromF(float f) {
    if constexpr (std::is_same_v<H, __half>)
      return __float2half_rn(f);
    else
      return __float2bfloat16_rn(f);
  }
};

using Bf16Vec = HalfVec<__nv_bfloat16, __nv_bfloat162, 0x7FC07FC0u>;
using Fp16Vec = HalfVec<__half, __half2, 0x7E007E00u>;

template <>
struct Vec<__nv_bfloat16> : Bf16Vec {};
template <>
struct Vec<__half> : Fp16Vec {};

// A thread's vectors of a tile of V vectors: u = threadIdx.x + i * blockDim.x for i < kVecs, those
// with u < V; f(i, u) runs for each, in order of i (unrolled, so arrays indexed by i stay registers).
template <int kVecs, class F>
__device__ __forceinline__ void forThreadVecs(int V, F&& f) {
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int u = threadIdx.x + i * blockDim.x;
    if (u < V) f(i, u);
  }
}

// A vector of quiet NaNs of T: what a failed call writes (device/protocol.cuh).
template <typename T>
__device__ __forceinline__ uint4 nanVec() {
  return make_uint4(Vec<T>::kNanWord, Vec<T>::kNanWord, Vec<T>::kNanWord, Vec<T>::kNanWord);
}

}  // namespace arfuse
