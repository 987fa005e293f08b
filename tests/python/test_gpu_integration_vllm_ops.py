"""GPU: the ops the vLLM pass inserts (arfuse.integrations.vllm), with the real library, 2 processes on
GPU 0 over a gloo group, without vLLM itself (its wheel is too large to bring to the GPU machine; the
pattern matching against vLLM's graphs is tested on the CPU by test_integration_vllm.py).

For arfuse_vllm::all_reduce_add_rms_norm_nvfp4 it checks, at a token count within the decode size
(arfuse's fused epilogue kernel) and one above it (the group's own all-reduce, arfuse's add+RMSNorm,
then arfuse._torch_quant.nvfp4), with fresh random inputs and outputs vLLM's shapes:
  - residual_out equals the fp64 sum rounded once, and every output is bitwise equal on both ranks;
  - the E2M1 bytes and the swizzled int32 block scales equal what the library's own epilogue
    (arfuse.torch.all_reduce_epilogue, quant nvfp4, swizzled) writes for the same inputs, and that
    equals arfuse._torch_quant.nvfp4 of the norm it returns; the scales' padding rows are zero;
  - dequantised values are within NVFP4's error of the fp64 norm.
The plain and FP8 ops run too and are checked against the fp64 reference.
Skipped with the reason without a GPU, torch or the library's multi-process functions."""
import io
import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the vLLM-op GPU test needs it")

from gpu_util import require_torch_multiprocess_gpu  # noqa: E402
from mp_util import run_ranks  # noqa: E402

HIDDEN = 512
MAX_TOKENS = 8
EPS = 1e-6
GLOBAL_SCALE = 448.0 * 6 / 8.0  # block scales stay below E4M3 saturation while the norm is within 8


@pytest.fixture(autouse=True)
def _gpu(lib):
    require_torch_multiprocess_gpu(lib, torch)


def _inputs(seed, rank, tokens):
    """Rank's x and the shared residual and weight: multiples of 1/8 in [-4, 4] (exact in bf16, and
    so is any sum of two of them), never all zero."""
    g = torch.Generator().manual_seed(seed)
    xs = [(torch.randint(-32, 33, (tokens, HIDDEN), generator=g) / 8.0) for _ in range(2)]
    residual = torch.randint(-32, 33, (tokens, HIDDEN), generator=g) / 8.0
    weight = 1.0 + torch.randint(-4, 5, (HIDDEN,), generator=g) / 16.0
    bf = lambda t: t.to(torch.bfloat16).cuda()  # noqa: E731
    return bf(xs[rank]), bf(residual), bf(weight), xs, residual, weight


def _fp64_norm(xs, residual, weight):
    res = (residual.double() + sum(x.double() for x in xs)).to(torch.bfloat16)
    r = res.double()
    return res, r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + EPS) * weight.double()


def _sf_offset(r, c, cols):
    """Byte of row r, block column c in the swizzled 128x4 layout ([row tiles][col tiles][32][4][4])."""
    return ((r // 128) * ((cols + 3) // 4) + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4


def _dequant_nvfp4(q, sf_words, tokens, g):
    """fp64 values of E2M1 bytes [tokens, hidden/2] with swizzled E4M3 scales (int32 words)."""
    from arfuse import _torch_quant as tq

    lut = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
    b = q.cpu().to(torch.int64)
    codes = torch.stack([b & 0xF, b >> 4], dim=-1).reshape(tokens, HIDDEN)
    vals = lut[codes & 7] * torch.where(codes & 8 != 0, -1.0, 1.0)
    sf = sf_words.cpu().contiguous().view(torch.uint8).reshape(-1)
    cols = HIDDEN // 16
    lin = torch.stack([sf[_sf_offset(r, c, cols)] for r in range(tokens) for c in range(cols)]).reshape(tokens, cols)
    scale = tq.e4m3_to_fp32(lin).double() / g
    return vals * scale.repeat_interleave(16, dim=1), scale


def vllm_ops_worker(world):
    torch.cuda.set_device(0)
    world.init_dist("gloo")
    import torch.distributed as dist

    import arfuse.torch as at
    from arfuse import _torch_quant as tq
    from arfuse.integrations import _glue
    from arfuse.integrations import _vllm_ops

    def engine_all_reduce(t):  # vLLM's all-reduce stands in as gloo on the CPU, summing in fp32
        c = t.float().cpu()
        dist.all_reduce(c)
        return c.to(t.dtype).to(t.device)

    cpu_group = dist.group.WORLD
    group = _glue.Group("tp", (0, 1), world.rank, 2, cpu_group, engine_all_reduce)
    f = _glue.Fusion("vllm", decline_safe=False)
    assert f.setup([group], cpu_group, MAX_TOKENS, HIDDEN, torch.bfloat16), "arfuse did not become active"
    _vllm_ops.set_state(f)  # as the pass (or the first op call) makes it
    _vllm_ops.register()
    ops = torch.ops.arfuse_vllm
    seed = world.share_from_rank0(int.from_bytes(os.urandom(4), "little"))
    g = torch.tensor([GLOBAL_SCALE], device="cuda")
    out = {"seed": seed, "cases": {}}
    for tokens in (3, MAX_TOKENS + 5):
        x, residual, weight, xs, res_cpu, w_cpu = _inputs(seed + tokens, world.rank, tokens)
        q, res, sf = ops.all_reduce_add_rms_norm_nvfp4(x, residual, weight, EPS, g, MAX_TOKENS, HIDDEN)
        torch.cuda.synchronize()
        case = {"q": q.cpu(), "res": res.cpu(), "sf": sf.cpu(), "shapes": [tuple(q.shape), tuple(res.shape),
                                                                                 tuple(sf.shape)]}
        if tokens <= MAX_TOKENS:  # the library's own epilogue on the same inputs: the same bytes
            comm = f.by_name["tp"].comm
            e = at.all_reduce_epilogue(comm, x, weight, EPS, residual=residual, quant="nvfp4", scale=g,
                                       scale_layout="swizzled")
            torch.cuda.synchronize()
            case["lib_q"], case["lib_sf"] = e.quant.view(torch.uint8).cpu(), e.scale.view(torch.uint8).cpu()
            case["lib_norm"] = e.norm.cpu()
            tq_q, tq_sf = tq.nvfp4(e.norm.float(), g, 1)
            case["tq_q"], case["tq_sf"] = tq_q.cpu(), tq_sf.cpu()
        else:  # the fallback's definition: engine all-reduce, arfuse's add+RMSNorm, torch quantisation
            norm, _ = _glue.add_rmsnorm(engine_all_reduce(x), residual, weight, EPS)
            tq_q, tq_sf = tq.nvfp4(norm.float(), g, 1)
            case["tq_q"], case["tq_sf"] = tq_q.cpu(), tq_sf.cpu()
        norm_p, res_p = ops.all_reduce_add_rms_norm(x, residual, weight, EPS, MAX_TOKENS, HIDDEN)
        q8, res8 = ops.all_reduce_add_rms_norm_fp8(x, residual, weight, EPS, torch.tensor([4.0 / 448.0], device="cuda"),
                                                 MAX_TOKENS, HIDDEN)
        torch.cuda.synchronize()
        case.update(norm=norm_p.cpu(), res_plain=res_p.cpu(), q8=q8.view(torch.uint8).cpu(), res8=res8.cpu())
        case["inputs"] = (xs, res_cpu, w_cpu)
        out["cases"][tokens] = case
    out["counters"] = {"/".join(k): v for k, v in _glue.counters().items()}
    f.destroy()
    # as bytes: tensors through a multiprocessing queue travel as shared-memory file descriptors,
    # which are gone once this process exits (EOFError in the parent)
    buf = io.BytesIO()
    torch.save(out, buf)
    return buf.getvalue()


def test_gpu_vllm_ops_two_processes_one_gpu():
    results = [torch.load(io.BytesIO(b)) for b in run_ranks(vllm_ops_worker, 2, (), timeout=600,
                                                             env={"ARFUSE_TIMEOUT_MS": "20000"})]
    print("seed", results[0]["seed"], "counters", results[0]["counters"])
    g = GLOBAL_SCALE
    for tokens, case in results[0]["cases"].items():
        other = results[1]["cases"][tokens]
        for k in ("q", "res", "sf", "norm", "res_plain", "q8", "res8"):
            assert torch.equal(case[k].view(torch.uint8), other[k].view(torch.uint8)), f"{tokens} tokens: {k} differs by rank"
        xs, res_cpu, w_cpu = case["inputs"]
        want_res, want_norm = _fp64_norm(xs, res_cpu, w_cpu)
        rows = (tokens + 127) // 128 * 128
        assert case["shapes"] == [(tokens, HIDDEN // 2), (tokens, HIDDEN), (rows, (HIDDEN // 16 + 3) // 4)]
        assert case["sf"].dtype == torch.int32 and case["q"].dtype == torch.uint8
        for k in ("res", "res_plain", "res8"):
            assert torch.equal(case[k], want_res), f"{tokens} tokens: {k} is not the fp64 sum rounded once"
        tol = 2 ** -7
        torch.testing.assert_close(case["norm"].double(), want_norm, rtol=tol, atol=tol * 1e-3)
        deq8 = case["q8"].view(torch.float8_e4m3fn).double() * (4.0 / 448.0)
        assert (deq8 - want_norm).abs().max().item() <= 0.07 * want_norm.abs().max().item() + 1e-3
        sf_bytes = case["sf"].contiguous().view(torch.uint8).reshape(-1)
        assert torch.equal(case["q"], case["tq_q"]), f"{tokens} tokens: E2M1 bytes differ from the torch quantisation"
        assert torch.equal(sf_bytes, case["tq_sf"].reshape(-1)), f"{tokens} tokens: block scales differ"
        if "lib_q" in case:
            assert torch.equal(case["q"], case["lib_q"].reshape(case["q"].shape)), "op and library epilogue differ"
            assert torch.equal(sf_bytes, case["lib_sf"].reshape(-1)), "op and library scales differ"
        cols = HIDDEN // 16
        used = torch.zeros_like(sf_bytes, dtype=torch.bool)
        for r in range(tokens):
            for c in range(cols):
                used[_sf_offset(r, c, cols)] = True
        assert int(sf_bytes[~used].abs().sum()) == 0, f"{tokens} tokens: the swizzled padding is not zero"
        deq, scale = _dequant_nvfp4(case["q"], case["sf"], tokens, g)
        blocks = want_norm.reshape(tokens, cols, 16)
        amax = blocks.abs().amax(-1).repeat_interleave(16, dim=1)
        err = (deq - want_norm).abs()
        assert bool((err <= 0.25 * amax + 1e-6).all()), f"{tokens} tokens: NVFP4 error above a quarter of the block max"
    counters = results[0]["counters"]
    assert counters.get("vllm/tp/arfuse", 0) >= 3 and counters.get("vllm/tp/engine-all-reduce", 0) >= 1, counters
