"""The quantised outputs of arfuseAllReduceEpilogue in plain torch, bit for bit as src/quant/formats.h
defines them (docs/quantization.md is the prose version):

    fp32_to_e4m3 / fp32_to_e2m1   formats.h fp32ToE4m3Sat / fp32ToE2m1Sat (RNE, saturating, NaN rules)
    e4m3_to_fp32                  formats.h e4m3ToFp32
    fp8_static(n, scale)          q = e4m3(n * (1 / s))                         (refFp8StaticRow)
    fp8_per_token(n)              s = max(amax / 448, 1 / 229376), q = e4m3(n / s) (refFp8PerTokenRow)
    nvfp4(n, g, layout)           E2M1 codes two per byte, E4M3 block scales in the layout, padding 0
                                  (refNvfp4Tensor)

Like formats.h, the conversions work on the fp32 bit pattern with integer operations (torch's own
float8 cast neither saturates nor drops a NaN's sign the way the instructions do), and the scale
arithmetic is single fp32 multiplications and divisions in formats.h's order. Every division has a
tensor on the numerator's device as divisor: on CUDA, torch turns a division by a CPU scalar into a
multiplication by its reciprocal, which is not the same number. No function synchronises with the
host, so they can be captured in a CUDA graph. The input `n` is the normalised value as the model
dtype holds it, widened to fp32 (what norm_out gets).

Imported by arfuse.torch only (it imports torch).
"""
import struct
from typing import Tuple

import torch

from ._quant_formats import (E4M3_MAX, FP8_MIN_TOKEN_SCALE_BITS, NVFP4_BLOCK, ONE_SIXTH_BITS, bits_f32,
                             sf_padded_cols, sf_padded_rows)
from ._types import ScaleLayout

__all__ = ["fp32_to_e4m3", "fp32_to_e2m1", "e4m3_to_fp32", "e2m1_to_fp32", "fp8_static", "fp8_per_token", "nvfp4",
           "pack_e2m1", "unpack_e2m1", "swizzle_scales", "fp32_constant"]


def fp32_constant(bits: int, device) -> torch.Tensor:
    """A 0-dim fp32 tensor on `device` with these bits. torch.full runs a fill kernel (no copy from
    host memory, which a CUDA graph capture refuses); the Python float is exactly the fp32 value, so
    its conversion to fp32 is exact."""
    return torch.full((), bits_f32(bits), dtype=torch.float32, device=device)


def _bits(x: torch.Tensor) -> torch.Tensor:
    if x.dtype != torch.float32:
        raise TypeError(f"expected a float32 tensor, got {x.dtype}")
    return x.contiguous().view(torch.int32)


def _shift_rne(mant: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """formats.h shiftRne: mant >> shift rounded to nearest even (shift >= 1). mant < 2^24 here, so every
    shift >= 25 gives 0 as 25 does (half = 2^24 > mant); clamping keeps the int32 shifts defined."""
    shift = shift.clamp(1, 25)
    one = torch.ones_like(shift)
    q = mant >> shift
    rem = mant & ((one << shift) - 1)
    half = one << (shift - 1)
    up = (rem > half) | ((rem == half) & ((q & 1) == 1))
    return q + up.to(q.dtype)


def _fp32_to_minifloat(x: torch.Tensor, *, mant: int, bias: int, code_bits: int, max_code: int,
                       nan_code: int) -> torch.Tensor:
    """fp32 -> the codes of a small float with `mant` mantissa bits and exponent bias `bias` (E4M3: 3, 7;
    E2M1: 1, 1), as formats.h converts: RNE, |x| at or above the largest finite value (and +-inf) ->
    +-max_code, NaN -> nan_code, -0 and negatives that round to 0 -> the sign bit alone."""
    u = _bits(x)
    sign_bit = 1 << (code_bits - 1)
    sign = (u >> (32 - code_bits)) & sign_bit  # arithmetic shift: this bit of the result is bit 31 of u
    a = u & 0x7FFFFFFF
    e = a >> 23
    # below the smallest normal 2^(1 - bias): subnormals in steps of 2^(1 - bias - mant);
    # |x| / step = mant24 * 2^(e - 150 + bias - 1 + mant), the result is the code
    sub = _shift_rne((a & 0x7FFFFF) | 0x800000, (150 - (bias - 1 + mant)) - e)
    sub = torch.where(e == 0, torch.zeros_like(sub), sub)  # fp32 zero or subnormal: far below the step
    drop = 23 - mant
    code = (a >> drop) - ((127 - bias) << mant)
    rem = a & ((1 << drop) - 1)
    half = 1 << (drop - 1)
    code = code + ((rem > half) | ((rem == half) & ((code & 1) == 1))).to(code.dtype)
    mag = torch.where(a < ((128 - bias) << 23), sub, code)
    largest = struct.unpack("<i", struct.pack("<f", _minifloat_value(max_code, mant, bias)))[0]  # a Python int:
    mag = torch.where(a >= largest, torch.full_like(mag, max_code), mag)  # no host-to-device copy (graph capture)
    out = torch.where(a > 0x7F800000, torch.full_like(mag, nan_code), sign | mag)
    return out.to(torch.uint8)


def _minifloat_value(code: int, mant: int, bias: int) -> float:
    """The value of a positive normal code (used for the saturation threshold)."""
    e, m = code >> mant, code & ((1 << mant) - 1)
    return (1 + m / (1 << mant)) * 2.0 ** (e - bias)


def fp32_to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """formats.h fp32ToE4m3Sat: fp32 -> E4M3 codes (uint8). RNE; |x| >= 448 and +-inf -> +-448 (0x7E /
    0xFE); NaN -> 0x7F whatever its sign; -0 and negatives that round to 0 -> 0x80."""
    return _fp32_to_minifloat(x, mant=3, bias=7, code_bits=8, max_code=0x7E, nan_code=0x7F)


def fp32_to_e2m1(x: torch.Tensor) -> torch.Tensor:
    """formats.h fp32ToE2m1Sat: fp32 -> E2M1 codes (uint8, low nibble). RNE; |x| >= 6 and +-inf -> +-6;
    NaN -> 0x7 (+6); -0 and negatives that round to 0 -> 0x8."""
    return _fp32_to_minifloat(x, mant=1, bias=1, code_bits=4, max_code=0x7, nan_code=0x7)


def _with_sign(sign: torch.Tensor, magnitude: torch.Tensor) -> torch.Tensor:
    """fp32 with the magnitude's bits and bit 31 set where sign != 0 (int32 arithmetic, no overflow)."""
    bits = magnitude.view(torch.int32)
    return torch.where(sign != 0, bits | -0x80000000, bits).view(torch.float32)


def e4m3_to_fp32(codes: torch.Tensor) -> torch.Tensor:
    """formats.h e4m3ToFp32: E4M3 codes (uint8 or float8_e4m3fn) -> fp32 (0x7F / 0xFF -> NaN, sign kept).
    Integer arithmetic rather than a table: nothing is copied from the host (CUDA-graph safe)."""
    c = codes.view(torch.uint8).to(torch.int32)
    e, m = (c >> 3) & 0xF, c & 0x7
    normal = ((e + 120) << 23 | m << 20).view(torch.float32)
    subnormal = m.to(torch.float32) * 0.001953125  # m * 2^-9: exact
    mag = torch.where(e == 0, subnormal, normal)
    mag = torch.where((e == 0xF) & (m == 0x7), torch.full_like(mag, float("nan")), mag)
    return _with_sign(c & 0x80, mag.contiguous())


def e2m1_to_fp32(codes: torch.Tensor) -> torch.Tensor:
    """formats.h e2m1ToFp32: E2M1 codes (uint8, low nibble) -> fp32."""
    c = codes.to(torch.int32)
    e, m = (c >> 1) & 0x3, c & 0x1
    normal = ((e + 126) << 23 | m << 22).view(torch.float32)
    mag = torch.where(e == 0, m.to(torch.float32) * 0.5, normal)
    return _with_sign(c & 0x8, mag.contiguous())


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """[..., 2k] E2M1 codes -> [..., k] bytes: element 2i in the low nibble (formats.h packE2m1x2)."""
    return (codes[..., 0::2] & 0xF) | ((codes[..., 1::2] & 0xF) << 4)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """The inverse of pack_e2m1: [..., k] bytes -> [..., 2k] codes."""
    return torch.stack((packed & 0xF, packed >> 4), dim=-1).flatten(-2)


def _abs_max(x: torch.Tensor, dim: int) -> torch.Tensor:
    """formats.h absMaxAccum from 0 over `dim`: the largest |x|, NaN ignored (exact, any order)."""
    a = (_bits(x) & 0x7FFFFFFF).view(torch.float32)
    a = torch.where(torch.isnan(a), torch.zeros_like(a), a)
    return a.amax(dim)


def _scalar(scale: torch.Tensor, like: torch.Tensor, what: str) -> torch.Tensor:
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32 or scale.numel() != 1:
        raise TypeError(f"{what} must be a float32 tensor of one element")
    return scale.reshape(()).to(like.device)


def fp8_static(n: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """refFp8StaticRow: q = e4m3(n * (1 / s)), 1 / s one correctly rounded division. n: fp32; scale: a
    float32 tensor of one element (the device memory the kernel reads). Returns uint8 codes of n's shape."""
    s = _scalar(scale, n, "the FP8 static scale")
    inv = torch.ones_like(s) / s
    return fp32_to_e4m3(n * inv)


def fp8_per_token(n: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """refFp8PerTokenRow per row (last dim): s = max(amax / 448, 1 / (448 * 512)) (formats.h
    fp8TokenScale: a division, then the floor) and q = e4m3(n / s), a true division per element.
    Returns (q: uint8 of n's shape, s: float32 of n's shape without its last dim)."""
    amax = _abs_max(n, -1)
    s = amax / torch.full_like(amax, E4M3_MAX)
    floor = fp32_constant(FP8_MIN_TOKEN_SCALE_BITS, n.device).expand_as(s)
    s = torch.where(s > floor, s, floor)  # a NaN amax (never produced) would give the floor, as in C
    q = fp32_to_e4m3(n / s.unsqueeze(-1).expand_as(n))
    return q, s


def swizzle_scales(sf: torch.Tensor, layout: int) -> torch.Tensor:
    """[rows, cols] block scales -> the layout's bytes (1-D, formats.h sfBytes long). Linear: row-major.
    Swizzled 128x4: padded with zeros to [ceil(rows/128)*128, ceil(cols/4)*4] and stored as
    [rows/128][cols/4][32][4][4], i.e. formats.h sfOffset (row r = 128 R + 32 A + B, col c = 4 C + D
    lands at R, C, B, A, D)."""
    rows, cols = sf.shape
    if int(layout) != ScaleLayout.Swizzled128x4:
        return sf.reshape(-1)
    prows, pcols = sf_padded_rows(layout, rows), sf_padded_cols(layout, cols)
    padded = torch.zeros((prows, pcols), dtype=sf.dtype, device=sf.device)
    padded[:rows, :cols] = sf
    return padded.view(prows // 128, 4, 32, pcols // 4, 4).permute(0, 3, 2, 1, 4).reshape(-1)


def nvfp4(n: torch.Tensor, global_scale: torch.Tensor, layout: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """refNvfp4Tensor: n is [rows, hidden] fp32, hidden a multiple of 16; global_scale a float32
    tensor of one element (g). Per block of 16:
        amax = max |x| (NaN ignored);  sf = e4m3(amax * (g * (1/6)));
        os = sf == 0 ? 0 : 1 / (float(sf) * (1 / g));  q = e2m1(x * os)
    Returns (q: uint8 [rows, hidden / 2], element 2i in the low nibble; sf: uint8 [sfBytes] in `layout`,
    the swizzled layout's padding zero)."""
    rows, hidden = n.shape
    if hidden % NVFP4_BLOCK:
        raise ValueError(f"hidden={hidden}: NVFP4 needs a multiple of {NVFP4_BLOCK}")
    cols = hidden // NVFP4_BLOCK
    g = _scalar(global_scale, n, "the NVFP4 global scale")
    blocks = n.reshape(rows, cols, NVFP4_BLOCK)
    amax = _abs_max(blocks, -1)                                            # [rows, cols]
    g6 = g * fp32_constant(ONE_SIXTH_BITS, n.device)                       # mulRn(g, 1/6)
    sf = fp32_to_e4m3(amax * g6.expand_as(amax))                           # nvfp4BlockScale
    one = torch.ones_like(amax)
    inv_g = torch.ones_like(g) / g                                         # divRn(1, g)
    den = e4m3_to_fp32(sf) * inv_g.expand_as(amax)                         # mulRn(float(sf), 1 / g)
    os = torch.where((sf & 0x7F) == 0, torch.zeros_like(amax), one / den)  # nvfp4OutputScale
    q = fp32_to_e2m1(blocks * os.unsqueeze(-1).expand_as(blocks))          # nvfp4Quant
    return pack_e2m1(q.reshape(rows, hidden)), swizzle_scales(sf, layout)
