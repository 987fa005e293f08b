"""The quantised epilogue's formats without torch (runs everywhere): the independent reference of
quant_ref.py against hand-computed values of docs/quantization.md, and arfuse/_quant_formats.py (the
scale-layout sizes and offsets, the E4M3 decode, the argument names the wrappers take) against it."""
import math
import struct

import pytest

import arfuse
from arfuse import _quant_formats as qf
import quant_ref as ref


def test_reference_e4m3_by_hand():
    assert len(ref.E4M3) == 127 and ref.E4M3[-1] == (448.0, 0x7E) and ref.E4M3[1] == (2.0 ** -9, 1)
    cases = [(0.0, 0x00), (-0.0, 0x80)] + list({1.0: 0x38, -1.0: 0xB8, 448.0: 0x7E, 449.0: 0x7E, 1e30: 0x7E,
             math.inf: 0x7E, -math.inf: 0xFE, -500.0: 0xFE, math.nan: 0x7F, -math.nan: 0x7F,
             1.0625: 0x38,      # tie between 1 (0x38) and 1.125 (0x39): the even code
             1.1875: 0x3A,      # tie between 1.125 (0x39) and 1.25 (0x3A)
             2.0 ** -9: 0x01, 2.0 ** -10: 0x00, -(2.0 ** -10): 0x80, 1.5 * 2.0 ** -10: 0x01,
             3 * 2.0 ** -10: 0x02,  # tie between 1 and 2 subnormal steps: the even one
             2.0 ** -6: 0x08, 0.3: 0x2A, 240.0: 0x77, 232.0: 0x76}.items())  # a list: 0.0 == -0.0 as keys
    for v, code in cases:
        assert ref.e4m3(v) == code, (v, hex(ref.e4m3(v)), hex(code))
    assert ref.e4m3(struct.unpack("<f", struct.pack("<I", 0xFFC00000))[0]) == 0x7F  # a negative NaN


def test_reference_e2m1_by_hand():
    cases = [(0.0, 0x0), (-0.0, 0x8)] + list({0.25: 0x0, 0.26: 0x1, 0.75: 0x2, 1.25: 0x2, 1.75: 0x4, 2.5: 0x4, 3.5: 0x6,
             5.0: 0x6, 5.01: 0x7, 6.0: 0x7, 100.0: 0x7, math.inf: 0x7, -math.inf: 0xF, math.nan: 0x7, -0.1: 0x8,
             -3.0: 0xD}.items())
    for v, code in cases:
        assert ref.e2m1(v) == code, (v, hex(ref.e2m1(v)), hex(code))


def test_reference_scales_by_hand():
    # per token: an all-zero row gets the floor 1 / 229376 and zeros; amax 448 gives s = 1 exactly
    q, s = ref.fp8_token_row([0.0] * 8)
    assert s == ref.f32(1.0 / 229376.0) and q == [0] * 8
    q, s = ref.fp8_token_row([448.0, -224.0, 1.0, math.nan])
    assert s == 1.0 and q == [0x7E, 0xF6, 0x38, 0x7F]
    # static: 1 / s once, then multiply
    assert ref.fp8_static_row([1.0, 2.0], 0.5) == [0x40, 0x48]
    # NVFP4, g = 1: amax 6 -> sf = e4m3(6 * f32(1/6)) = e4m3(1.0000000298) = 1.0 (0x38), os = 1
    codes, scales = ref.nvfp4_row([6.0, -3.0, 0.5, 0.25] + [0.0] * 12, 1.0)
    assert scales == [0x38] and codes[:4] == [0x7, 0xD, 0x1, 0x0]
    # a block below the smallest scale: sf = 0, os = 0, every value 0 (a NaN stays +6)
    codes, scales = ref.nvfp4_row([1e-6, math.nan] + [0.0] * 14, 1.0)
    assert scales == [0] and codes[:2] == [0x0, 0x7]
    assert ref.pack_nibbles([0x1, 0xF, 0x7, 0x0]) == bytes([0xF1, 0x07])  # element 2i in the low nibble


def test_reference_swizzle_matches_the_documented_offset():
    # docs/quantization.md: offset = (row/128)*ceil(cols/4)*512 + (col/4)*512 + (row%32)*16 + ((row%128)/32)*4 + col%4
    for rows, cols in ((1, 1), (5, 4), (130, 7), (256, 8)):
        pos = ref.swizzled_positions(rows, cols)
        k = (cols + 3) // 4
        assert len(pos) == (rows + 127) // 128 * 128 * k * 4
        for (r, c), off in pos.items():
            assert off == (r // 128) * k * 512 + (c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4


@pytest.mark.parametrize("rows, cols", [(1, 1), (3, 4), (5, 7), (127, 8), (128, 4), (129, 9), (300, 2)])
def test_layout_sizes_and_offsets(rows, cols):
    assert qf.sf_bytes(0, rows, cols) == rows * cols
    assert qf.sf_bytes(1, rows, cols) == ((rows + 127) // 128 * 128) * ((cols + 3) // 4 * 4)
    pos = ref.swizzled_positions(rows, cols)
    assert qf.sf_bytes(1, rows, cols) == len(pos)
    for (r, c), off in pos.items():
        assert qf.sf_offset(1, r, c, rows, cols) == off
    for r in range(rows):
        for c in range(cols):
            assert qf.sf_offset(0, r, c, rows, cols) == r * cols + c
    assert qf.nvfp4_scale_shape(1, rows, cols * 16) == (qf.sf_padded_rows(1, rows), qf.sf_padded_cols(1, cols))
    assert qf.nvfp4_scale_bytes(0, rows, cols * 16) == rows * cols


def test_e4m3_decode_table_and_constants():
    for c in range(256):
        want = ref.e4m3_value(c)
        got = ref.from_bits(qf.E4M3_DECODE_BITS[c])
        assert (math.isnan(want) and math.isnan(got)) or (want == got and math.copysign(1, want) ==
                                                         math.copysign(1, got)), c
        if not math.isnan(want):
            assert ref.e4m3(want) == c or (c == 0x80 and want == 0)  # every finite code round-trips
    assert qf.ONE_SIXTH_BITS == ref.bits(ref.f32(1.0 / 6.0))
    assert qf.FP8_MIN_TOKEN_SCALE_BITS == ref.bits(ref.FP8_MIN_TOKEN_SCALE)


def test_argument_names():
    Q, L = arfuse.Quant, arfuse.ScaleLayout
    assert [qf.quant_arg(v) for v in (None, "fp8", "fp8-token", "FP8_TOKEN", "nvfp4", 3, Q.Fp8Static)] == \
        [Q["None"], Q.Fp8Static, Q.Fp8PerToken, Q.Fp8PerToken, Q.Nvfp4, Q.Nvfp4, Q.Fp8Static]
    assert [qf.layout_arg(v) for v in ("linear", "swizzled", 1, L.Linear)] == \
        [L.Linear, L.Swizzled128x4, L.Swizzled128x4, L.Linear]
    with pytest.raises(arfuse.InvalidArgument, match="quant='int4': expected None, 'fp8', 'fp8-token' or 'nvfp4'"):
        qf.quant_arg("int4")
    with pytest.raises(arfuse.InvalidArgument, match="quant=7"):
        qf.quant_arg(7)
    with pytest.raises(arfuse.InvalidArgument, match="scale_layout='tiled'"):
        qf.layout_arg("tiled")
