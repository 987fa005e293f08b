// CPU reference of the quantised epilogue: one row of normalised values (already rounded to the
// model dtype and widened to fp32) -> the bytes and scales the kernels must write, bit for bit.
// Pure C++ (no CUDA), built on the definitions of quant/formats.h; docs/quantization.md explains them.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace arfuse {
namespace quant {

// FP8 E4M3, static per-tensor scale s (> 0): q[i] = e4m3(v[i] * (1 / s)).   q: [hidden] bytes.
void refFp8StaticRow(const float* v, int hidden, float s, uint8_t* q);

// FP8 E4M3, per-token scale: returns s = max(amax / 448, 1 / (448 * 512)) (the row's entry of the
// float scale tensor) and writes q[i] = e4m3(v[i] / s).   q: [hidden] bytes.
float refFp8PerTokenRow(const float* v, int hidden, uint8_t* q);

// NVFP4 with global scale g (> 0): hidden must be a multiple of 16. Writes q: [hidden / 2] bytes
// (element 2i in the low nibble of byte i) and the row's hidden / 16 block scales (E4M3 codes) into
// the whole scale tensor `sf` of a `rows` x (hidden / 16) tensor, at sfOffset(layout, row, ...).
// Returns false (writing nothing) when hidden is not a multiple of 16 or row is not in [0, rows).
bool refNvfp4Row(const float* v, int hidden, float g, int row, int rows, int layout, uint8_t* q, uint8_t* sf);

// Zeroes the padding bytes of a swizzled scale tensor (nothing to do for the linear layout): every
// byte of sfBytes(layout, rows, hidden / 16) that no (row < rows, col < hidden / 16) maps to.
void refNvfp4ZeroPadding(int rows, int hidden, int layout, uint8_t* sf);

// Whole tensor, [rows][hidden] row-major values: every row plus the padding, as one kernel launch
// must leave the output. q: rows * hidden / 2 bytes; sf: sfBytes(layout, rows, hidden / 16) bytes.
bool refNvfp4Tensor(const float* v, int rows, int hidden, float g, int layout, uint8_t* q, uint8_t* sf);

// Decoded value of element i of an NVFP4 row (for error checks): e2m1(q) * float(sf) / g.
double refNvfp4Dequant(const uint8_t* q, const uint8_t* sf, int i, int row, int rows, int hidden, int layout, float g);

}  // namespace quant
}  // namespace arfuse
