"""Sizes, constants and argument names of the quantised epilogue (arfuseAllReduceEpilogue), without
torch: the NVFP4 scale-factor layouts (sizes and offsets), the E4M3 decode table and the names the
Python wrappers accept for the quant mode and the layout.

Everything here restates src/quant/formats.h, which is the definition (docs/quantization.md is its
prose version); keep the two in step. The pure-torch quantisation itself is in _torch_quant.py.
"""
import struct
from typing import Any, List

from ._coerce import bad
from ._types import Quant, ScaleLayout

E4M3_MAX = 448.0       # formats.h kE4m3Max
E2M1_MAX = 6.0         # formats.h kE2m1Max
NVFP4_BLOCK = 16       # formats.h kNvfp4Block: values per E4M3 block scale
ONE_SIXTH_BITS = 0x3E2AAAAB  # the fp32 constant 1.0f / 6.0f of nvfp4BlockScale
# formats.h kFp8MinTokenScale = 1.0f / (448.0f * 512.0f): 229376 is exact in fp32, and the division
# is rounded once (the double 1 / 229376 rounded to fp32 is the same float: 1/7 has no fp32 tie).
FP8_MIN_TOKEN_SCALE_BITS = struct.unpack("<I", struct.pack("<f", 1.0 / 229376.0))[0]


def f32_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def bits_f32(u: int) -> float:
    return struct.unpack("<f", struct.pack("<I", u & 0xFFFFFFFF))[0]


# ---- NVFP4 scale-factor layouts: formats.h sfPaddedRows / sfPaddedCols / sfBytes / sfOffset -----------
def sf_padded_rows(layout: int, rows: int) -> int:
    """formats.h sfPaddedRows: rows rounded up to 128 for the swizzled layout."""
    return (rows + 127) // 128 * 128 if int(layout) == ScaleLayout.Swizzled128x4 else rows


def sf_padded_cols(layout: int, cols: int) -> int:
    """formats.h sfPaddedCols: scale columns (hidden / 16) rounded up to 4 for the swizzled layout."""
    return (cols + 3) // 4 * 4 if int(layout) == ScaleLayout.Swizzled128x4 else cols


def sf_bytes(layout: int, rows: int, cols: int) -> int:
    """formats.h sfBytes: the size in bytes of a rows x cols (cols = hidden / 16) block-scale tensor."""
    return sf_padded_rows(layout, rows) * sf_padded_cols(layout, cols)


def sf_offset(layout: int, row: int, col: int, rows: int, cols: int) -> int:
    """formats.h sfOffset: where block (row, col) of a rows x cols scale tensor lives."""
    del rows  # one tensor: the row count only sizes the buffer, as in formats.h
    if int(layout) != ScaleLayout.Swizzled128x4:
        return row * cols + col
    k_tiles = (cols + 3) // 4
    return (row // 128) * k_tiles * 512 + (col // 4) * 512 + (row % 32) * 16 + ((row % 128) // 32) * 4 + col % 4


def nvfp4_scale_bytes(layout: int, tokens: int, hidden: int) -> int:
    """Bytes of the NVFP4 block scales of a [tokens, hidden] output (api/validate.cc nvfp4ScaleBytes)."""
    return sf_bytes(layout, tokens, hidden // NVFP4_BLOCK)


def nvfp4_scale_shape(layout: int, tokens: int, hidden: int):
    """The 2-D shape the wrappers allocate for NVFP4 block scales: [paddedRows, paddedCols]."""
    cols = hidden // NVFP4_BLOCK
    return (sf_padded_rows(layout, tokens), sf_padded_cols(layout, cols))


# ---- E4M3 decode: formats.h e4m3ToFp32, as fp32 bit patterns of every code ---------------------------------
def e4m3_decode_bits(code: int) -> int:
    sign = (code & 0x80) << 24
    e, m = (code >> 3) & 0xF, code & 0x7
    if e == 0xF and m == 0x7:
        return sign | 0x7FC00000  # NaN (sign kept)
    if e == 0:
        return sign | f32_bits(m * 0.001953125)  # m * 2^-9, exact
    return sign | (e + 120) << 23 | m << 20


E4M3_DECODE_BITS: List[int] = [e4m3_decode_bits(c) for c in range(256)]


# ---- the names the Python wrappers take -----------------------------------------------------------------
_QUANT_NAMES = {
    "none": Quant["None"], "fp8": Quant.Fp8Static, "fp8-static": Quant.Fp8Static,
    "fp8-token": Quant.Fp8PerToken, "fp8-per-token": Quant.Fp8PerToken, "nvfp4": Quant.Nvfp4,
}
_LAYOUT_NAMES = {"linear": ScaleLayout.Linear, "swizzled": ScaleLayout.Swizzled128x4,
                 "swizzled128x4": ScaleLayout.Swizzled128x4}


def quant_arg(quant: Any) -> Quant:
    """None, a Quant, its int, or a name: "fp8" (static scale), "fp8-token" (per-token scale), "nvfp4"."""
    if quant is None:
        return Quant["None"]
    if isinstance(quant, str):
        q = _QUANT_NAMES.get(quant.lower().replace("_", "-"))
        if q is None:
            raise bad(f"quant={quant!r}: expected None, 'fp8', 'fp8-token' or 'nvfp4' (or an arfuse.Quant)")
        return q
    if isinstance(quant, bool) or not isinstance(quant, int) or int(quant) not in {int(q) for q in Quant}:
        raise bad(f"quant={quant!r}: expected None, 'fp8', 'fp8-token' or 'nvfp4' (or an arfuse.Quant 0..3)")
    return Quant(int(quant))


def layout_arg(layout: Any) -> ScaleLayout:
    """A ScaleLayout, its int, or a name: "linear" or "swizzled" (the 128x4 tiles)."""
    if isinstance(layout, str):
        lay = _LAYOUT_NAMES.get(layout.lower())
        if lay is None:
            raise bad(f"scale_layout={layout!r}: expected 'linear' or 'swizzled' (or an arfuse.ScaleLayout)")
        return lay
    if isinstance(layout, bool) or not isinstance(layout, int) or int(layout) not in (0, 1):
        raise bad(f"scale_layout={layout!r}: expected 'linear' or 'swizzled' (or an arfuse.ScaleLayout 0..1)")
    return ScaleLayout(int(layout))
