// The number formats of the quantised epilogue, defined once, in software: FP8 E4M3, FP4 E2M1, the
// NVFP4 block quantisation (16 values, E4M3 block scale, fp32 global scale), the FP8 static and
// per-token scales, and the two layouts of the NVFP4 scale factors. Every function here is the
// *definition*: the CUDA kernels call them (or a hardware instruction proven to give the same bits),
// the CPU reference (quant/reference.h) calls them, and tests/cpu/quant_test.cc checks them against
// brute force and against NVIDIA's own software emulation of the conversion instructions.
// docs/quantization.md is the prose version, with the public sources each rule was checked against.
//
// Conversions work on the fp32 bit pattern with integer operations only, so host and device give
// the same bits on every architecture. The arithmetic around them (scales) uses only correctly
// rounded IEEE multiplications and divisions, spelled mulRn / divRn so that the device build keeps
// them exact even under --use_fast_math, and never a multiply followed by an add (no FMA can form).
//
//   fp32ToE4m3Sat  == cvt.rn.satfinite.e4m3x2.f32 (sm_89+):  RNE; |x| > 448 (and +-inf) -> +-448;
//                     NaN -> 0x7F (sign dropped); -0 and negatives that round to 0 -> 0x80.
//   fp32ToE2m1Sat  == cvt.rn.satfinite.e2m1x2.f32 (sm_100a/f, sm_120a/f): RNE; |x| > 6 (and +-inf)
//                     -> +-6; NaN -> +6 (0x7, "NaN results are converted to positive MAX_NORM");
//                     -0 and negatives that round to 0 -> 0x8.
//
// NVFP4, per block of 16 consecutive values x[0..15] of a row, with global scale g (fp32, > 0):
//   amax = max |x[i]|              (NaN ignored, as fmaxf does; exact, so any reduction order)
//   sf   = e4m3(amax * (g * (1/6)))                               -> the stored block scale
//   os   = sf == 0 ? 0 : 1 / (float(sf) * (1 / g))                -> the encode scale
//   q[i] = e2m1(x[i] * os)         byte i/2 of the row holds q[2j] in its low nibble, q[2j+1] high.
// This is the exact-arithmetic NVFP4 recipe of NVIDIA Transformer Engine (core_nvfp4.cuh:
// S_dec_b = block_amax * (S_enc * (1/6)); encode scale 1 / (float(S_dec_b_fp8) * (1 / S_enc))), also
// TensorRT-LLM's TE_EXACT_NVFP4 variant of cvt_warp_fp16_to_fp4. TensorRT-LLM's default variant
// computes the same expression with rcp.approx.ftz (a hardware approximation software cannot
// reproduce), so it can differ from this by one rounding of the scale; Transformer Engine's and
// this definition differ only when sf underflows to 0 (they clamp 1/0 to FLT_MAX; here os = 0, so
// the whole block is 0 -- its dequantised value q * sf / g is 0 either way).
//
// FP8 static (scale s from a device pointer):  q = e4m3(x * (1 / s)), 1 / s computed once.
// FP8 per token (row absmax):  s = max(absmax / 448, 1 / (448 * 512)),  q = e4m3(x / s)  (a true
// division per element, as vLLM's fused rms_norm_dynamic_per_token_quant does "for exact match with
// FBGEMM"). The floor on s is vLLM's min_scaling_factor: an all-zero row gets s = 1/229376, q = 0.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define ARFUSE_QHD __host__ __device__ __forceinline__
#else
#define ARFUSE_QHD inline
#endif

namespace arfuse {
namespace quant {

constexpr float kE4m3Max = 448.0f;
constexpr float kE2m1Max = 6.0f;
constexpr int kNvfp4Block = 16;                                // values per E4M3 block scale
constexpr float kFp8MinTokenScale = 1.0f / (448.0f * 512.0f);  // per-token scale floor (vLLM's)

// Scale-factor layouts of NVFP4 block scales (the `layout` argument of sfOffset / sfBytes).
constexpr int kSfLayoutLinear = 0;         // [rows][cols] row-major, no padding
constexpr int kSfLayoutSwizzled128x4 = 1;  // [ceil(rows/128)][ceil(cols/4)][32][4][4], zero padded

// ---- bit access and exactly rounded arithmetic ---------------------------------------------------
//
// floatBits / bitsFloat: a float's bit pattern and back. mulRn / divRn: a * b and a / b rounded to
// nearest even, whatever the compiler flags (fast-math on the device). The device build has an
// intrinsic for each; the host's are plain C++.
#ifdef __CUDA_ARCH__
ARFUSE_QHD uint32_t floatBits(float f) { return __float_as_uint(f); }
ARFUSE_QHD float bitsFloat(uint32_t u) { return __uint_as_float(u); }
ARFUSE_QHD float mulRn(float a, float b) { return __fmul_rn(a, b); }
ARFUSE_QHD float divRn(float a, float b) { return __fdiv_rn(a, b); }
#else
template <class To, class From>
ARFUSE_QHD To bitCast(From v) {
  static_assert(sizeof(To) == sizeof(From), "a bit cast keeps the size");
  To t;
  memcpy(&t, &v, sizeof t);
  return t;
}
ARFUSE_QHD uint32_t floatBits(float f) { return bitCast<uint32_t>(f); }
ARFUSE_QHD float bitsFloat(uint32_t u) { return bitCast<float>(u); }
ARFUSE_QHD float mulRn(float a, float b) { return a * b; }
ARFUSE_QHD float divRn(float a, float b) { return a / b; }
#endif

// max(m, |v|) ignoring a NaN v (fmaxf semantics). Commutative and associative over non-NaN values,
// so a row's or block's amax is the same for every reduction order.
ARFUSE_QHD float absMaxAccum(float m, float v) {
  const float a = bitsFloat(floatBits(v) & 0x7FFFFFFFu);
  return a > m ? a : m;
}

// Round the significand `mant` (with its implicit bit) right by `shift` (>= 1), to nearest even.
ARFUSE_QHD uint32_t shiftRne(uint32_t mant, uint32_t shift) {
  if (shift >= 32) return 0;
  const uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

// ---- saturating RNE encoding, shared by E4M3 and E2M1 ---------------------------------------------

// fp32 -> the code of a format with kExp exponent bits (bias 2^(kExp-1) - 1), kMant mantissa bits
// and subnormals, the sign bit above them: RNE; |x| >= the value of kMaxCode (and +-inf) -> +-that;
// NaN -> kNanCode (whatever its sign); -0 and negatives that round to 0 -> the sign bit alone.
template <int kExp, int kMant, uint32_t kMaxCode, uint32_t kNanCode>
ARFUSE_QHD uint8_t fp32ToSmallFloatSat(float x) {
  constexpr uint32_t kSignBit = 1u << (kExp + kMant);
  constexpr uint32_t kBias = (1u << (kExp - 1)) - 1u;
  constexpr uint32_t kDrop = 23u - kMant;                                  // fp32 mantissa bits the code drops
  constexpr uint32_t kRebias = (127u - kBias) << kMant;                    // fp32 (exponent, top mantissa) - code
  constexpr uint32_t kMaxBits = (kMaxCode + kRebias) << kDrop;             // the fp32 of kMaxCode
  constexpr uint32_t kMinNormalBits = ((1u << kMant) + kRebias) << kDrop;  // 2^(1 - bias)
  const uint32_t u = floatBits(x);
  const uint32_t sign = (u >> (31u - kExp - kMant)) & kSignBit;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint8_t>(kNanCode);
  if (a >= kMaxBits) return static_cast<uint8_t>(sign | kMaxCode);
  if (a < kMinNormalBits) {  // the subnormals, step 2^(1 - bias - kMant)
    const uint32_t e = a >> 23;
    if (e == 0) return static_cast<uint8_t>(sign);  // fp32 zero or subnormal: far below half the step
    // |x| / step = mant * 2^(e - 150 + bias - 1 + kMant), rounded: the code (2^kMant: the first normal).
    return static_cast<uint8_t>(sign | shiftRne((a & 0x7FFFFFu) | 0x800000u, 151u - kBias - kMant - e));
  }
  // Normal: code = (e - 127 + bias) << kMant | top kMant mantissa bits, then RNE on the kDrop dropped
  // bits; a carry out of the mantissa moves to the next binade. |x| below the maximum rounds to at
  // most kMaxCode.
  uint32_t code = (a >> kDrop) - kRebias;
  const uint32_t rem = a & ((1u << kDrop) - 1u);
  if (rem > (1u << (kDrop - 1u)) || (rem == (1u << (kDrop - 1u)) && (code & 1u))) ++code;
  return static_cast<uint8_t>(sign | code);
}

// ---- FP8 E4M3 (OCP "fn": bias 7, no infinities, NaN = S.1111.111, max 448, min subnormal 2^-9) ----

// NaN: canonical 0x7F, sign dropped; >= 448 (incl. inf): 448 (0x7E).
ARFUSE_QHD uint8_t fp32ToE4m3Sat(float x) { return fp32ToSmallFloatSat<4, 3, 0x7Eu, 0x7Fu>(x); }

ARFUSE_QHD float e4m3ToFp32(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t e = (c >> 3) & 0xFu;
  const uint32_t m = c & 0x7u;
  if (e == 0xF && m == 0x7) return bitsFloat(sign | 0x7FC00000u);                        // NaN (sign kept)
  if (e == 0) return bitsFloat(sign | floatBits(static_cast<float>(m) * 0.001953125f));  // m * 2^-9
  return bitsFloat(sign | (e + 120u) << 23 | m << 20);
}

// ---- FP4 E2M1 (bias 1, no inf/NaN: 0, 0.5, 1, 1.5, 2, 3, 4, 6), the code in the low nibble -------

// NaN: positive MAX_NORM (+6, 0x7); >= 6 (incl. inf): 6.
ARFUSE_QHD uint8_t fp32ToE2m1Sat(float x) { return fp32ToSmallFloatSat<2, 1, 0x7u, 0x7u>(x); }

ARFUSE_QHD float e2m1ToFp32(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x8u) << 28;
  const uint32_t e = (c >> 1) & 0x3u;
  const uint32_t m = c & 0x1u;
  if (e == 0) return bitsFloat(sign | (m ? 0x3F000000u : 0u));  // 0 or 0.5
  return bitsFloat(sign | (e + 126u) << 23 | m << 22);
}

// Two E2M1 codes in one byte: `lo` (the even element) in the low nibble.
ARFUSE_QHD uint8_t packE2m1x2(uint8_t lo, uint8_t hi) { return static_cast<uint8_t>((lo & 0xFu) | (hi & 0xFu) << 4); }

// ---- FP8 scales ------------------------------------------------------------------------------------

// Static per-tensor scale s (> 0): multiply by this, once computed per kernel or row.
ARFUSE_QHD float fp8StaticInvScale(float s) { return divRn(1.0f, s); }
ARFUSE_QHD uint8_t fp8StaticQuant(float x, float invScale) { return fp32ToE4m3Sat(mulRn(x, invScale)); }

// Per-token scale from the row's amax (absMaxAccum over the row, starting from 0): the value stored
// in the scale tensor, and the divisor of every element of the row.
ARFUSE_QHD float fp8TokenScale(float rowAmax) {
  const float s = divRn(rowAmax, kE4m3Max);
  return s > kFp8MinTokenScale ? s : kFp8MinTokenScale;  // a NaN amax (not produced) -> the floor
}
ARFUSE_QHD uint8_t fp8TokenQuant(float x, float tokenScale) { return fp32ToE4m3Sat(divRn(x, tokenScale)); }

// ---- NVFP4 -----------------------------------------------------------------------------------------

// The block scale (an E4M3 code; amax >= 0 so the sign bit is 0) of a block with amax (absMaxAccum
// over its 16 values, starting from 0), under global scale g.
ARFUSE_QHD uint8_t nvfp4BlockScale(float blockAmax, float g) {
  return fp32ToE4m3Sat(mulRn(blockAmax, mulRn(g, 1.0f / 6.0f)));
}

// The encode scale every value of the block is multiplied by before e2m1.
ARFUSE_QHD float nvfp4OutputScale(uint8_t sf, float g) {
  if ((sf & 0x7Fu) == 0) return 0.0f;
  return divRn(1.0f, mulRn(e4m3ToFp32(sf), divRn(1.0f, g)));
}

ARFUSE_QHD uint8_t nvfp4Quant(float x, float outputScale) { return fp32ToE2m1Sat(mulRn(x, outputScale)); }

// ---- NVFP4 scale-factor layouts --------------------------------------------------------------------
// `rows` = tokens, `cols` = scale columns = hidden / 16; (row, col) = the block's row and column.
//   linear:   offset = row * cols + col;  bytes = rows * cols.
//   swizzled 128x4 (what Blackwell block-scaled GEMMs read; CUTLASS / cuBLAS / TensorRT-LLM
//   get_sf_out_offset_128x4): rows padded to 128 and cols to 4,
//     offset = (row / 128) * ceil(cols / 4) * 512 + (col / 4) * 512
//            + (row % 32) * 16 + ((row % 128) / 32) * 4 + col % 4;
//   bytes = roundUp(rows, 128) * roundUp(cols, 4). The padding bytes (rows >= `rows` of the last
//   128-row tile, cols >= `cols` of the last 4-column tile) must be written as 0, as
//   TensorRT-LLM's quantize kernels do: a GEMM reads them.

ARFUSE_QHD size_t sfPaddedRows(int layout, int rows) {
  return layout == kSfLayoutSwizzled128x4 ? (static_cast<size_t>(rows) + 127) / 128 * 128 : static_cast<size_t>(rows);
}
ARFUSE_QHD size_t sfPaddedCols(int layout, int cols) {
  return layout == kSfLayoutSwizzled128x4 ? (static_cast<size_t>(cols) + 3) / 4 * 4 : static_cast<size_t>(cols);
}

ARFUSE_QHD size_t sfOffset(int layout, int row, int col, int rows, int cols) {
  (void)rows;  // one tensor: the row count only sizes the buffer (a batch stride would need it)
  const size_t r = static_cast<size_t>(row), c = static_cast<size_t>(col);
  if (layout != kSfLayoutSwizzled128x4) return r * static_cast<size_t>(cols) + c;
  const size_t kTiles = (static_cast<size_t>(cols) + 3) / 4;
  return (r / 128) * kTiles * 512 + (c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4;
}

ARFUSE_QHD size_t sfBytes(int layout, int rows, int cols) {
  return sfPaddedRows(layout, rows) * sfPaddedCols(layout, cols);
}

}  // namespace quant
}  // namespace arfuse
