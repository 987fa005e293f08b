#include "quant/reference.h"

#include "quant/formats.h"

namespace arfuse {
namespace quant {

void refFp8StaticRow(const float* v, int hidden, float s, uint8_t* q) {
  const float inv = fp8StaticInvScale(s);
  for (int i = 0; i < hidden; ++i) q[i] = fp8StaticQuant(v[i], inv);
}

float refFp8PerTokenRow(const float* v, int hidden, uint8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < hidden; ++i) amax = absMaxAccum(amax, v[i]);
  const float s = fp8TokenScale(amax);
  for (int i = 0; i < hidden; ++i) q[i] = fp8TokenQuant(v[i], s);
  return s;
}

bool refNvfp4Row(const float* v, int hidden, float g, int row, int rows, int layout, uint8_t* q, uint8_t* sf) {
  if (hidden <= 0 || hidden % kNvfp4Block != 0 || row < 0 || row >= rows) return false;
  const int cols = hidden / kNvfp4Block;
  for (int c = 0; c < cols; ++c) {
    const float* x = v + c * kNvfp4Block;  // [block of 16]
    float amax = 0.0f;
    for (int i = 0; i < kNvfp4Block; ++i) amax = absMaxAccum(amax, x[i]);
    const uint8_t s = nvfp4BlockScale(amax, g);
    const float os = nvfp4OutputScale(s, g);
    sf[sfOffset(layout, row, c, rows, cols)] = s;
    for (int i = 0; i < kNvfp4Block; i += 2) {
      q[(c * kNvfp4Block + i) / 2] = packE2m1x2(nvfp4Quant(x[i], os), nvfp4Quant(x[i + 1], os));
    }
  }
  return true;
}

void refNvfp4ZeroPadding(int rows, int hidden, int layout, uint8_t* sf) {
  if (layout != kSfLayoutSwizzled128x4) return;
  const int cols = hidden / kNvfp4Block;
  const int prows = static_cast<int>(sfPaddedRows(layout, rows));
  const int pcols = static_cast<int>(sfPaddedCols(layout, cols));
  for (int r = 0; r < prows; ++r) {
    for (int c = 0; c < pcols; ++c) {
      if (r >= rows || c >= cols) sf[sfOffset(layout, r, c, rows, cols)] = 0;
    }
  }
}

bool refNvfp4Tensor(const float* v, int rows, int hidden, float g, int layout, uint8_t* q, uint8_t* sf) {
  if (rows < 0 || hidden <= 0 || hidden % kNvfp4Block != 0) return false;
  for (int r = 0; r < rows; ++r) {
    refNvfp4Row(v + static_cast<size_t>(r) * hidden, hidden, g, r, rows, layout,
                q + static_cast<size_t>(r) * hidden / 2, sf);
  }
  refNvfp4ZeroPadding(rows, hidden, layout, sf);
  return true;
}

double refNvfp4Dequant(const uint8_t* q, const uint8_t* sf, int i, int row, int rows, int hidden, int layout, float g) {
  const uint8_t byte = q[i / 2];
  const uint8_t code = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
  const uint8_t s = sf[sfOffset(layout, row, i / kNvfp4Block, rows, hidden / kNvfp4Block)];
  return static_cast<double>(e2m1ToFp32(code)) * static_cast<double>(e4m3ToFp32(s)) / static_cast<double>(g);
}

}  // namespace quant
}  // namespace arfuse
