// Quantised outputs of the extended epilogue: FP8 E4M3 and NVFP4 (E2M1 + E4M3 block scales).
//
// The formats and their exact rounding are defined once, in software, in quant/formats.h (also the
// CPU reference's definition). Where the architecture has a conversion instruction with the same
// rounding (round to nearest even, saturating to the largest finite value) it is used instead:
//   - cvt.rn.satfinite.e4m3x2.f32 on sm_89 and newer;
//   - cvt.rn.satfinite.e2m1x2.f32 on the family- or arch-specific Blackwell targets (sm_100f,
//     sm_120f, built by default), whose SASS is F2FP.SATFINITE.E2M1 (a CPU test checks it is there).
// Both give the same bits as the software path for every finite input (NaN is not produced by the
// epilogue unless an input is NaN).
#pragma once

#include <stdint.h>

#include "quant/formats.h"

namespace arfuse {

// Two fp32 values -> two E4M3 bytes, `lo` in the low byte.
__device__ __forceinline__ uint32_t cvtE4m3x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return static_cast<uint32_t>(quant::fp32ToE4m3Sat(lo)) | static_cast<uint32_t>(quant::fp32ToE4m3Sat(hi)) << 8;
#endif
}

// Two fp32 values -> one byte of two E2M1 codes, `lo` in the low nibble.
__device__ __forceinline__ uint32_t cvtE2m1x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000 && \
    (defined(__CUDA_ARCH_FAMILY_SPECIFIC__) || defined(__CUDA_ARCH_SPECIFIC__))
  uint32_t r;
  asm("{ .reg .b8 q; cvt.rn.satfinite.e2m1x2.f32 q, %1, %2; cvt.u32.u8 %0, q; }" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return static_cast<uint32_t>(quant::fp32ToE2m1Sat(lo) & 0xF) | static_cast<uint32_t>(quant::fp32ToE2m1Sat(hi) & 0xF)
                                                                     << 4;
#endif
}

}  // namespace arfuse
