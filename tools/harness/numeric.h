// Host-side scalar conversions matching the device's round-to-nearest-even, for references and
// for emulating the kernels' exact fp32-in-rank-order arithmetic.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "arfuse/arfuse.h"

namespace arfuse {
namespace numeric {

inline float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t floatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bf16ToFloat(uint16_t h) { return bitsToFloat(static_cast<uint32_t>(h) << 16); }
inline uint16_t floatToBf16(float f) {
  uint32_t u = floatToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float fp16ToFloat(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31)
    v = man ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}
inline uint16_t floatToFp16(float f) {
  const uint32_t u = floatToBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if (std::isnan(f)) return 0x7e00;
  const float a = std::fabs(f);
  if (a >= 65520.f) return sign | 0x7c00;  // rounds to infinity
  if (a < std::ldexp(1.f, -14)) {          // subnormal: units of 2^-24, round half to even
    const float q = a * std::ldexp(1.f, 24);
    return sign | static_cast<uint16_t>(std::nearbyint(q));
  }
  int e;
  std::frexp(a, &e);                      // a = m * 2^e, m in [0.5, 1)
  const float q = std::ldexp(a, 11 - e);  // in [1024, 2048)
  uint32_t m = static_cast<uint32_t>(std::nearbyint(q));
  int exp = e - 1 + 15;
  if (m == 2048) {
    m = 1024;
    ++exp;
  }
  if (exp >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>((exp << 10) | (m & 0x3ffu));
}

inline size_t elemSize(arfuseDataType_t d) { return d == arfuseFloat32 ? 4 : 2; }

// Reads element i of a dtype buffer as float.
inline float load(const void* buf, size_t i, arfuseDataType_t d) {
  if (d == arfuseFloat32) return static_cast<const float*>(buf)[i];
  const uint16_t h = static_cast<const uint16_t*>(buf)[i];
  return d == arfuseBfloat16 ? bf16ToFloat(h) : fp16ToFloat(h);
}
// Rounds f to the dtype and stores it.
inline void store(void* buf, size_t i, float f, arfuseDataType_t d) {
  if (d == arfuseFloat32)
    static_cast<float*>(buf)[i] = f;
  else
    static_cast<uint16_t*>(buf)[i] = d == arfuseBfloat16 ? floatToBf16(f) : floatToFp16(f);
}
// f rounded to the dtype, as float.
inline float round(float f, arfuseDataType_t d) {
  uint32_t tmp = 0;
  store(&tmp, 0, f, d);
  return load(&tmp, 0, d);
}

// Relative tolerance of a norm-wise error ||out - ref|| / ||ref|| for outputs of this dtype.
inline double tolerance(arfuseDataType_t d) { return d == arfuseBfloat16 ? 1e-2 : d == arfuseFloat16 ? 2e-3 : 1e-5; }

}  // namespace numeric
}  // namespace arfuse
