"""arfuse.torch's extended epilogue without a GPU: the pure-torch quantisation (arfuse/_torch_quant.py)
bit for bit against the independent reference of quant_ref.py (every bf16 and fp16 value, ties, the
special values, whole NVFP4 tensors in both scale layouts with their padding), the op's schema and
fake implementation (shape and dtype checks on meta tensors, tracing with fake tensors), and the
comm=None path over gloo in 1 and 2 processes. Skipped without torch."""
import math
import random

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: arfuse.torch tests need it (pip install torch)")

import arfuse  # noqa: E402
import arfuse.torch as at  # noqa: E402,F401  (registers the ops)
from arfuse import _torch_quant as tq  # noqa: E402
import quant_ref as ref  # noqa: E402
from mp_util import run_ranks  # noqa: E402

EPS = 1e-6


def _all_patterns(dtype):
    return torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype).float()


def _special_values():
    """Ties and their neighbours for both formats, and the values the docs single out."""
    vals = [0.0, -0.0, math.inf, -math.inf, math.nan, 448.0, 464.0, 480.0, 6.0, 5.0, 7.0, 1e-45, -1e-45, 1e-38,
            3.4e38, 2.0 ** -10, 2.0 ** -9, 2.0 ** -6]
    for table in (ref.E4M3, ref.E2M1):
        for (a, _), (b, _) in zip(table, table[1:]):
            mid = (a + b) / 2  # exact in fp32
            for v in (mid, ref.from_bits(ref.bits(mid) + 1), ref.from_bits(ref.bits(mid) - 1), a, b):
                vals += [v, -v]
    t = torch.tensor(vals, dtype=torch.float32)
    return torch.cat([t, torch.tensor([ref.from_bits(0xFFC00000), ref.from_bits(0x7F800001)])])  # -NaN, sNaN bits


def _ref_codes(fn, values):
    return [fn(v) for v in values.tolist()]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_conversions_match_the_reference_on_every_16_bit_value(dtype):
    x = _all_patterns(dtype)
    assert tq.fp32_to_e4m3(x).tolist() == _ref_codes(ref.e4m3, x)
    assert tq.fp32_to_e2m1(x).tolist() == _ref_codes(ref.e2m1, x)


def test_conversions_on_ties_specials_and_random_fp32():
    rng = random.Random(9)
    rand = [ref.from_bits(rng.getrandbits(32)) for _ in range(20000)]  # every exponent, NaNs included
    rand += [ref.f32(rng.uniform(-500, 500)) for _ in range(20000)] + [ref.f32(rng.uniform(-7, 7)) for _ in range(20000)]
    x = torch.cat([_special_values(), torch.tensor(rand, dtype=torch.float32)])
    assert tq.fp32_to_e4m3(x).tolist() == _ref_codes(ref.e4m3, x)
    assert tq.fp32_to_e2m1(x).tolist() == _ref_codes(ref.e2m1, x)
    # torch's own cast agrees on the finite values once they are clamped (it does not saturate)
    if hasattr(torch, "float8_e4m3fn"):
        finite = x[torch.isfinite(x)]
        cast = finite.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
        assert torch.equal(cast, tq.fp32_to_e4m3(finite))


def test_decoding():
    codes = torch.arange(256, dtype=torch.uint8)
    got = tq.e4m3_to_fp32(codes).tolist()
    for c in range(256):
        want = ref.e4m3_value(c)
        assert (math.isnan(want) and math.isnan(got[c])) or (want == got[c] and math.copysign(1, want) ==
                                                            math.copysign(1, got[c])), c
    assert tq.e2m1_to_fp32(torch.arange(16, dtype=torch.uint8)).tolist() == [ref.e2m1_value(c) for c in range(16)]
    packed = tq.pack_e2m1(torch.tensor([[1, 15, 7, 0]], dtype=torch.uint8))
    assert packed.tolist() == [[0xF1, 0x07]] and tq.unpack_e2m1(packed).tolist() == [[1, 15, 7, 0]]


def _rows(rng, tokens, hidden, dtype=torch.bfloat16):
    """Normalised-looking rows rounded to `dtype`, with a zero row, a row of tiny values (NVFP4 block
    scales that underflow), and a few NaN / inf entries."""
    rows = [[rng.gauss(0, 1) * rng.choice([1, 1, 4, 1 / 64]) for _ in range(hidden)] for _ in range(tokens)]
    if tokens >= 3:
        rows[1] = [0.0] * hidden
        rows[2] = [rng.gauss(0, 1e-7) for _ in range(hidden)]
    if tokens >= 4:
        rows[3][5], rows[3][17], rows[3][-1] = math.nan, math.inf, -math.inf
    return torch.tensor(rows, dtype=torch.float32).to(dtype).float()


def test_fp8_static_and_per_token_match_the_reference():
    rng = random.Random(3)
    n = _rows(rng, 6, 96)
    for s in (1.0, 0.0173, 3.0e-3, 7.0):
        scale = torch.tensor([s], dtype=torch.float32)
        want = [ref.fp8_static_row(row, ref.f32(s)) for row in n.tolist()]
        assert tq.fp8_static(n, scale).tolist() == want
    q, s = tq.fp8_per_token(n)
    for i, row in enumerate(n.tolist()):
        want_q, want_s = ref.fp8_token_row(row)
        assert q[i].tolist() == want_q and s[i].item() == want_s, i
    assert s[1].item() == ref.FP8_MIN_TOKEN_SCALE and q[1].tolist() == [0] * 96  # the zero row


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("tokens, hidden", [(1, 16), (5, 64), (6, 112), (130, 48)])
def test_nvfp4_matches_the_reference(layout, tokens, hidden):
    rng = random.Random(tokens * 1000 + hidden)
    n = _rows(rng, tokens, hidden)
    for g in (1.0, 448.0 * 6 / 3.7, 2.0 ** -20):
        q, sf = tq.nvfp4(n, torch.tensor([g], dtype=torch.float32), layout)
        want_q, want_sf = ref.nvfp4_tensor(n.tolist(), ref.f32(g), layout)
        assert bytes(q.flatten().tolist()) == want_q
        assert bytes(sf.tolist()) == want_sf  # padding included: zero
        assert sf.numel() == arfuse._quant_formats.sf_bytes(layout, tokens, hidden // 16)


def test_swizzle_scales_writes_zero_padding():
    sf = torch.full((5, 3), 0xAB, dtype=torch.uint8)
    out = tq.swizzle_scales(sf, 1)
    assert out.numel() == 128 * 4 and int((out == 0xAB).sum()) == 15 and int((out == 0).sum()) == 512 - 15
    pos = ref.swizzled_positions(5, 3)
    assert sorted(i for i, v in enumerate(out.tolist()) if v) == sorted(pos[(r, c)] for r in range(5) for c in range(3))


# ---- the op: schema, fake implementation -----------------------------------------------------------------
def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


def test_epilogue_op_is_registered_with_optional_outputs():
    schema = str(torch.ops.arfuse.all_reduce_epilogue.default._schema)
    for part in ("int comm_id", "Tensor? residual_in", "bool weight_plus_one", "int quant", "int scale_layout",
                 "Tensor? scale_in", "Tensor(a!)? norm_out", "Tensor(b!)? residual_out", "Tensor(c!)? quant_out",
                 "Tensor(d!)? scale_out"):
        assert part in schema, (part, schema)


def _fake(quant=0, layout=0, tokens=5, hidden=64, **over):
    args = dict(x=_meta(tokens, hidden), residual_in=None, weight=_meta(hidden), eps=EPS, weight_plus_one=False,
                quant=quant, scale_layout=layout, scale_in=None, norm_out=_meta(tokens, hidden), residual_out=None,
                quant_out=None, scale_out=None)
    args.update(over)
    return torch.ops.arfuse.all_reduce_epilogue(1, *args.values())


def test_fake_implementation_checks_the_quantised_tensors():
    f32, u8 = torch.float32, torch.uint8
    assert _fake() is None
    assert _fake(1, scale_in=_meta(1, dtype=f32), quant_out=_meta(5, 64, dtype=torch.float8_e4m3fn)) is None
    assert _fake(1, scale_in=_meta(dtype=f32), quant_out=_meta(5, 64, dtype=u8), norm_out=None) is None
    assert _fake(2, quant_out=_meta(5, 64, dtype=u8), scale_out=_meta(5, dtype=f32)) is None
    assert _fake(3, 0, scale_in=_meta(1, dtype=f32), quant_out=_meta(5, 32, dtype=u8),
                 scale_out=_meta(5, 4, dtype=u8)) is None
    assert _fake(3, 1, scale_in=_meta(1, dtype=f32), quant_out=_meta(5, 32, dtype=u8),
                 scale_out=_meta(128 * 4, dtype=u8)) is None
    assert _fake(3, 1, tokens=130, hidden=80, scale_in=_meta(1, dtype=f32), quant_out=_meta(130, 40, dtype=u8),
                 scale_out=_meta(256, 8, dtype=torch.float8_e4m3fn), x=_meta(130, 80), weight=_meta(80),
                 norm_out=None, residual_out=_meta(130, 80)) is None
    bad = arfuse.InvalidArgument
    with pytest.raises(bad, match="no output requested"):
        _fake(norm_out=None)
    with pytest.raises(bad, match="quant=5"):
        _fake(5)
    with pytest.raises(bad, match="scale_layout=2"):
        _fake(0, 2)
    with pytest.raises(bad, match="scale_in is None: FP8 static and NVFP4"):
        _fake(1, quant_out=_meta(5, 64, dtype=u8))
    with pytest.raises(bad, match="scale_in is torch.bfloat16: expected torch.float32"):
        _fake(1, scale_in=_meta(1), quant_out=_meta(5, 64, dtype=u8))
    with pytest.raises(bad, match="quant_out is None"):
        _fake(2, scale_out=_meta(5, dtype=f32))
    with pytest.raises(bad, match="quant_out is torch.float16"):
        _fake(2, quant_out=_meta(5, 64, dtype=torch.float16), scale_out=_meta(5, dtype=f32))
    with pytest.raises(bad, match=r"quant_out has shape \(5, 32\), expected \(5, 64\)"):
        _fake(2, quant_out=_meta(5, 32, dtype=u8), scale_out=_meta(5, dtype=f32))
    with pytest.raises(bad, match=r"scale_out has shape \(4,\)"):
        _fake(2, quant_out=_meta(5, 64, dtype=u8), scale_out=_meta(4, dtype=f32))
    with pytest.raises(bad, match="hidden=72: NVFP4 quantises blocks of 16"):
        _fake(3, hidden=72, scale_in=_meta(1, dtype=f32), quant_out=_meta(5, 36, dtype=u8),
              scale_out=_meta(5, 4, dtype=u8), x=_meta(5, 72), weight=_meta(72), norm_out=_meta(5, 72))
    with pytest.raises(bad, match=r"scale_out has shape \(5, 4\), expected \(512,\) or \(128, 4\) \(swizzled"):
        _fake(3, 1, scale_in=_meta(1, dtype=f32), quant_out=_meta(5, 32, dtype=u8), scale_out=_meta(5, 4, dtype=u8))
    with pytest.raises(bad, match=r"quant_out has shape \(5, 64\), expected \(5, 32\) \(two E2M1 codes per byte\)"):
        _fake(3, 0, scale_in=_meta(1, dtype=f32), quant_out=_meta(5, 64, dtype=u8), scale_out=_meta(5, 4, dtype=u8))
    with pytest.raises(bad, match=r"residual_in has shape \(5, 32\)"):
        _fake(residual_in=_meta(5, 32))


def test_op_traces_with_fake_tensors():
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(x, w, g, norm, q, sf):
        torch.ops.arfuse.all_reduce_epilogue(1, x, None, w, EPS, True, 3, 1, g, norm, None, q, sf)
        return norm, q, sf

    args = (torch.zeros(4, 32, dtype=torch.bfloat16), torch.zeros(32, dtype=torch.bfloat16), torch.ones(1),
            torch.empty(4, 32, dtype=torch.bfloat16), torch.empty(4, 16, dtype=torch.uint8),
            torch.empty(128, 4, dtype=torch.uint8))
    gm = make_fx(fn, tracing_mode="fake")(*args)
    assert "arfuse.all_reduce_epilogue" in gm.code


@pytest.mark.parametrize("quant,layout", [(1, 0), (2, 0), (3, 0), (3, 1)])
def test_fake_impl_traces_with_symbolic_shapes(quant, layout):
    # torch.compile with dynamic shapes (and opcheck's test_aot_dispatch_dynamic) hands the fake
    # implementation SymInt sizes, which compare but cannot be hashed.
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(x, w, g, q, sf):
        torch.ops.arfuse.all_reduce_epilogue(1, x, None, w, EPS, False, quant, layout, g, None, None, q, sf)
        return q, sf

    tokens, hidden = 4, 32
    if quant == 3:
        q = torch.empty(tokens, hidden // 2, dtype=torch.uint8)
        sf = torch.empty(128 * 4 if layout else tokens * hidden // 16, dtype=torch.uint8)
    else:
        q = torch.empty(tokens, hidden, dtype=torch.uint8)
        sf = torch.empty(tokens, dtype=torch.float32)
    args = (torch.zeros(tokens, hidden, dtype=torch.bfloat16), torch.zeros(hidden, dtype=torch.bfloat16), torch.ones(1),
            q, sf)
    gm = make_fx(fn, tracing_mode="symbolic")(*args)
    assert "arfuse.all_reduce_epilogue" in gm.code


# ---- comm=None: the torch path over gloo ------------------------------------------------------------------
def _inputs(nranks, tokens, hidden, dtype, seed=77):
    gen = torch.Generator().manual_seed(seed)

    def r(*shape):
        return (torch.randint(-32, 33, shape, generator=gen) / 8.0).to(dtype)

    xs = [r(tokens, hidden) for _ in range(nranks)]
    return xs, r(tokens, hidden), (torch.randint(-4, 5, (hidden,), generator=gen) / 16.0).to(dtype)


def _epilogue_worker(world, tokens, hidden, dtype_name):
    import arfuse.torch as at

    world.init_dist()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype_name]
    xs, residual, weight = _inputs(world.nranks, tokens, hidden, dtype)
    x = xs[world.rank].clone()
    out = {}
    g = torch.tensor([448.0 * 6 / 5.0])
    for name, kw in {"none": {}, "fp8": {"quant": "fp8", "scale": torch.tensor([0.0123])},
                     "fp8-token": {"quant": "fp8-token"}, "nvfp4": {"quant": "nvfp4", "scale": g},
                     "nvfp4-swizzled": {"quant": "nvfp4", "scale": g, "scale_layout": "swizzled"}}.items():
        for first_layer in (False, True):
            for plus_one in (False, True):
                kwargs = dict(kw, residual=None if first_layer else residual, weight_plus_one=plus_one)
                if "nvfp4" in name:  # dirty outputs: the padding must be written
                    q = torch.full((tokens, hidden // 2), 0xEE, dtype=torch.uint8)
                    layout = arfuse._quant_formats.layout_arg(kw.get("scale_layout", "linear"))
                    sf = torch.full(arfuse._quant_formats.nvfp4_scale_shape(layout, tokens, hidden), 0xEE,
                                    dtype=torch.uint8)
                    kwargs.update(quant_out=q, scale_out=sf)
                o = at.all_reduce_epilogue(None, x, weight, EPS, **kwargs)
                out[(name, first_layer, plus_one)] = tuple(None if t is None else t.contiguous().view(torch.uint8)
                                                           .flatten().tolist() if t.dtype != torch.float32 else
                                                           t.flatten().tolist() for t in o)
                out[(name, first_layer, plus_one, "raw")] = (o.norm.float().tolist(), o.residual.float().tolist())
    assert torch.equal(x, xs[world.rank]), "the input was written"
    # in place, as an engine calls it: norm_out=x, residual_out=residual
    res = residual.clone()
    o = at.all_reduce_epilogue(None, x, weight, EPS, residual=res, norm_out=x, residual_out=res, quant="fp8-token")
    assert o.norm is x and o.residual is res
    out["inplace"] = (x.float().tolist(), res.float().tolist(), o.quant.view(torch.uint8).flatten().tolist())
    out["counts"] = at.counters()
    return out


def _check_epilogue_results(results, nranks, tokens, hidden, dtype):
    xs, residual, weight = _inputs(nranks, tokens, hidden, dtype)
    for r in results[1:]:
        assert r == results[0], "ranks disagree"
    got = results[0]
    g = ref.f32(448.0 * 6 / 5.0)
    for key, value in got.items():
        if not isinstance(key, tuple) or len(key) != 3:
            continue
        name, first_layer, plus_one = key
        norm_vals, res_vals = got[key + ("raw",)]
        # residual: exact inputs, one rounding of an exact sum
        want_res = (sum(x.double() for x in xs) + (0 if first_layer else residual.double())).to(dtype)
        assert res_vals == want_res.float().tolist()
        r = want_res.double()
        w = weight.double() + (1.0 if plus_one else 0.0)
        want_norm = (r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + EPS) * w).to(dtype).double()
        tol = {torch.bfloat16: 2 ** -7, torch.float16: 2 ** -10, torch.float32: 2 ** -22}[dtype]
        torch.testing.assert_close(torch.tensor(norm_vals, dtype=torch.float64), want_norm, rtol=tol, atol=tol * 1e-3)
        # the quantised bytes: bit for bit the reference's, from the norm this call produced
        rows = [[float(v) for v in row] for row in norm_vals]
        _, _, q, s = value
        if name == "none":
            assert q is None and s is None
        elif name == "fp8":
            assert q == [c for row in rows for c in ref.fp8_static_row(row, ref.f32(0.0123))] and s is None
        elif name == "fp8-token":
            want = [ref.fp8_token_row(row) for row in rows]
            assert q == [c for qs, _ in want for c in qs] and s == [sc for _, sc in want]
        else:
            want_q, want_sf = ref.nvfp4_tensor(rows, g, 1 if "swizzled" in name else 0)
            assert bytes(q) == want_q and bytes(s) == want_sf


@pytest.mark.parametrize("nranks, dtype_name", [(1, "bf16"), (2, "bf16"), (2, "fp16"), (2, "fp32")])
def test_comm_none_epilogue_over_gloo(nranks, dtype_name):
    tokens, hidden = 5, 64
    results = run_ranks(_epilogue_worker, nranks, (tokens, hidden, dtype_name), timeout=180)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype_name]
    _check_epilogue_results(results, nranks, tokens, hidden, dtype)
    inplace_norm, inplace_res, inplace_q = results[0]["inplace"]
    assert inplace_norm == results[0][("none", False, False, "raw")][0]
    assert inplace_res == results[0][("none", False, False, "raw")][1]
    for r in results:
        assert r["counts"] == {("all_reduce_epilogue", "torch"): 21}
