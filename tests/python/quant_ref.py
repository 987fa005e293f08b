"""An independent pure-Python statement of the quantised epilogue's number formats, for the tests
(no torch, nothing shared with arfuse's code): E4M3 and E2M1 by brute force over their code tables
(nearest value, ties to the even code, saturation, NaN rules of docs/quantization.md), fp32
arithmetic through struct (a product or quotient of two fp32 values computed in double and rounded
once to fp32 is the correctly rounded fp32 result), and the swizzled 128x4 scale layout by walking
its [row tiles][col tiles][32][4][4] order."""
import bisect
import math
import struct


def f32(v: float) -> float:
    """v rounded to fp32 (round to nearest even), as a Python float."""
    try:
        return struct.unpack("<f", struct.pack("<f", v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


def bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def from_bits(u: int) -> float:
    return struct.unpack("<f", struct.pack("<I", u))[0]


def mul(a: float, b: float) -> float:
    return f32(a * b)


def div(a: float, b: float) -> float:
    return f32(a / b)


# ---- code tables: every non-negative finite value with its code --------------------------------------------
def _e4m3_value(code: int) -> float:
    e, m = (code >> 3) & 0xF, code & 7
    return m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)


E4M3 = [(_e4m3_value(c), c) for c in range(0x7F)]  # 0x00..0x7E: 0 .. 448 (0x7F is NaN)
E2M1 = list(zip([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], range(8)))


def _nearest(table, a: float) -> int:
    values = [v for v, _ in table]
    i = bisect.bisect_left(values, a)
    if i < len(values) and values[i] == a:
        return table[i][1]
    lo, hi = table[i - 1], table[i]
    dlo, dhi = a - lo[0], hi[0] - a
    if dlo != dhi:
        return lo[1] if dlo < dhi else hi[1]
    return lo[1] if lo[1] % 2 == 0 else hi[1]  # a tie: the even code


def e4m3(x: float) -> int:
    if math.isnan(x):
        return 0x7F
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    return sign | (0x7E if a >= 448.0 else _nearest(E4M3, a))


def e2m1(x: float) -> int:
    if math.isnan(x):
        return 0x7
    sign = 0x8 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    return sign | (0x7 if a >= 6.0 else _nearest(E2M1, a))


def e4m3_value(code: int) -> float:
    if code & 0x7F == 0x7F:
        return math.nan
    return (-1.0 if code & 0x80 else 1.0) * _e4m3_value(code & 0x7F)


def e2m1_value(code: int) -> float:
    return (-1.0 if code & 0x8 else 1.0) * E2M1[code & 7][0]


def abs_max(values) -> float:
    return max([0.0] + [abs(v) for v in values if not math.isnan(v)])


# ---- the three quant modes, per row of fp32 values ------------------------------------------------------------
def fp8_static_row(row, s: float):
    inv = div(1.0, s)
    return [e4m3(mul(v, inv)) for v in row]


FP8_MIN_TOKEN_SCALE = div(1.0, 448.0 * 512.0)


def fp8_token_row(row):
    s = max(div(abs_max(row), 448.0), FP8_MIN_TOKEN_SCALE)
    return [e4m3(div(v, s)) for v in row], s


def nvfp4_row(row, g: float):
    """(codes: one per element, block scale codes: one per 16 elements)."""
    sixth = f32(1.0 / 6.0)
    codes, scales = [], []
    for b in range(0, len(row), 16):
        block = row[b:b + 16]
        sf = e4m3(mul(abs_max(block), mul(g, sixth)))
        os = 0.0 if sf & 0x7F == 0 else div(1.0, mul(e4m3_value(sf), div(1.0, g)))
        scales.append(sf)
        codes += [e2m1(mul(v, os)) for v in block]
    return codes, scales


def pack_nibbles(codes):
    return bytes(codes[i] | codes[i + 1] << 4 for i in range(0, len(codes), 2))


def swizzled_positions(rows: int, cols: int):
    """{(row, col): byte offset} of the swizzled 128x4 layout, padding included, by walking the
    storage order [ceil(rows/128)][ceil(cols/4)][32][4][4]: row = 128 R + 32 A + B, col = 4 C + D."""
    pos, k = {}, 0
    for R in range((rows + 127) // 128):
        for C in range((cols + 3) // 4):
            for B in range(32):
                for A in range(4):
                    for D in range(4):
                        pos[(128 * R + 32 * A + B, 4 * C + D)] = k
                        k += 1
    return pos


def scale_bytes(scales_per_row, layout: int) -> bytes:
    """All rows' block scales ([rows][cols] codes) in the layout; padding 0."""
    rows, cols = len(scales_per_row), len(scales_per_row[0]) if scales_per_row else 0
    if layout == 0:
        return bytes(c for row in scales_per_row for c in row)
    pos = swizzled_positions(rows, cols)
    out = bytearray(len(pos))
    for r, row in enumerate(scales_per_row):
        for c, code in enumerate(row):
            out[pos[(r, c)]] = code
    return bytes(out)


def nvfp4_tensor(rows_values, g: float, layout: int):
    """(value bytes, scale bytes) of a whole [rows][hidden] tensor."""
    q, scales = b"", []
    for row in rows_values:
        codes, sf = nvfp4_row(row, g)
        q += pack_nibbles(codes)
        scales.append(sf)
    return q, scale_bytes(scales, layout)
