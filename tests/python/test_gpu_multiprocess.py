"""GPU, one rank per process: Communicator.init_rank (unique id from rank 0 through a queue) on raw
device pointers, and arfuse.torch.from_process_group over a gloo group (eager, CUDA-graph replay,
torch.compile, the torch fallback), 2 and 3 processes on GPU 0 and on distinct GPUs when there are
enough, all against an fp64 reference and bitwise-equal across ranks; ranks disagreeing on the config
all get Mismatch; and examples/tp_decoder.py with 2 processes. Processes on one GPU time-slice: small
shapes, 20 s device timeouts, every process joined against a deadline and killed on failure.
Skipped with a printed reason without a GPU, without the library's multi-process functions, and
(the torch parts) without torch."""
import ctypes
import os
import random
import sys

import pytest

import arfuse
from conftest import PACKAGE_DIR, ROOT
from gpu_util import Cuda, pack, random_values, reference, require_gpu, ulp_tolerance, unpack
from mp_util import run_command, run_ranks

EPS = 1e-6
TIMEOUT_MS = 20000
DEADLINE = 240  # seconds for a whole multi-process test, start-up and CUDA contexts included


@pytest.fixture(scope="module", autouse=True)
def _gpu_and_library():
    lib = arfuse.load()
    missing = [n for n in arfuse._lib.MULTI_PROCESS if not lib.has(n)]
    if missing:
        pytest.skip(f"{lib.path} lacks {', '.join(missing)}: built before multi-process communicators")
    require_gpu()


def _device_count():
    cuda = Cuda()
    n = ctypes.c_int(0)
    cuda.rt.cudaGetDeviceCount.argtypes = [ctypes.POINTER(ctypes.c_int)]
    return n.value if cuda.rt.cudaGetDeviceCount(ctypes.byref(n)) == 0 else 0


def _placement(kind, nranks):
    """Per-rank devices: "shared" puts every rank on GPU 0; "distinct" one GPU per rank (skipped
    when there are not enough)."""
    if kind == "shared":
        return [0] * nranks
    count = _device_count()
    if count < nranks:
        pytest.skip(f"{nranks} distinct GPUs needed, {count} visible")
    return list(range(nranks))


# ---- raw pointers through init_rank ------------------------------------------------------------------------
def _raw_worker(world, devices, tokens, hidden):
    from arfuse import DataType

    uid = world.share_from_rank0(arfuse.get_unique_id().hex() if world.rank == 0 else None)
    device = devices[world.rank]
    cuda = Cuda()
    cuda.rt.cudaSetDevice.argtypes = [ctypes.c_int]
    cuda.ok(cuda.rt.cudaSetDevice(device), "cudaSetDevice")
    comm = arfuse.Communicator.init_rank(world.nranks, uid, world.rank, device, max_tokens=64, max_hidden=4096,
                                         timeout_ms=TIMEOUT_MS)
    out = {}
    try:
        assert (comm.rank, comm.nranks, comm.device) == (world.rank, world.nranks, device)
        n = tokens * hidden
        x, res, norm, rout = (cuda.malloc(n * 4) for _ in range(4))  # sized for the widest dtype
        w = cuda.malloc(hidden * 4)
        stream = cuda.stream()
        rng = random.Random(77)  # the same on every rank: every rank knows every x
        for dtype in (DataType.Bfloat16, DataType.Float16, DataType.Float32):
            nbytes = n * dtype.itemsize
            xs = [random_values(rng, n) for _ in range(world.nranks)]
            residual = random_values(rng, n)
            weight = [1.0 + rng.randint(-4, 4) / 16.0 for _ in range(hidden)]
            cuda.upload(x, pack(dtype, xs[world.rank]))
            cuda.upload(res, pack(dtype, residual))
            cuda.upload(w, pack(dtype, weight))
            cuda.sync()
            comm.all_reduce_add_rmsnorm(x, res, w, EPS, norm, rout, tokens, hidden, dtype, stream=stream)
            cuda.sync(stream)
            want_norm, want_res = reference(dtype, xs, residual, weight, EPS, tokens, hidden)
            got_norm_b, got_res_b = cuda.download(norm, nbytes), cuda.download(rout, nbytes)
            assert unpack(dtype, got_res_b) == want_res, dtype
            tol = ulp_tolerance(dtype)
            bad = [(i, g, v) for i, (g, v) in enumerate(zip(unpack(dtype, got_norm_b), want_norm))
                   if abs(g - v) > tol * max(abs(v), 1e-3)]
            assert not bad, f"{dtype.label}: {len(bad)} norm_out values off, first {bad[:3]}"
            out[f"fused {dtype.label}"] = (got_norm_b, got_res_b)
        # Plain all-reduce in place, fp32: exact.
        f32 = DataType.Float32
        xs = [random_values(rng, 4 * 512) for _ in range(world.nranks)]
        cuda.upload(x, pack(f32, xs[world.rank]))
        cuda.sync()
        comm.all_reduce(x, x, 4, 512, f32, stream=stream)
        cuda.sync(stream)
        assert unpack(f32, cuda.download(x, 4 * 512 * 4)) == [sum(v) for v in zip(*xs)]
        # CUDA graph (bf16): capture once, replay on new data in the same buffers.
        dtype = DataType.Bfloat16
        nbytes = n * dtype.itemsize
        residual = random_values(rng, n)
        weight = [1.0 + rng.randint(-4, 4) / 16.0 for _ in range(hidden)]
        cuda.upload(res, pack(dtype, residual))
        cuda.upload(w, pack(dtype, weight))
        cuda.sync()
        exe = cuda.capture(stream, lambda: comm.all_reduce_add_rmsnorm(x, res, w, EPS, norm, rout, tokens, hidden,
                                                                       dtype, stream=stream))
        for i in range(2):
            xs = [random_values(rng, n) for _ in range(world.nranks)]
            cuda.upload(x, pack(dtype, xs[world.rank]))
            cuda.sync()
            cuda.ok(cuda.rt.cudaGraphLaunch(exe, stream), "cudaGraphLaunch")
            cuda.sync(stream)
            _, want_res = reference(dtype, xs, residual, weight, EPS, tokens, hidden)
            assert unpack(dtype, cuda.download(rout, nbytes)) == want_res
            out[f"graph {i}"] = cuda.download(norm, nbytes)
        cuda.rt.cudaGraphExecDestroy(exe)
        assert comm.async_error() == arfuse.Result.Success
    finally:
        comm.destroy()
    return out


@pytest.mark.parametrize("placement", ["shared", "distinct"])
@pytest.mark.parametrize("nranks", [2, 3])
def test_init_rank_processes_against_fp64(nranks, placement):
    devices = _placement(placement, nranks)
    results = run_ranks(_raw_worker, nranks, (devices, 5, 1024), timeout=DEADLINE)
    for r in results[1:]:
        assert r == results[0], "ranks disagree bitwise"


def _mismatch_worker(world):
    uid = world.share_from_rank0(arfuse.get_unique_id().hex() if world.rank == 0 else None)
    try:
        arfuse.Communicator.init_rank(world.nranks, uid, world.rank, 0, max_tokens=32 + 32 * world.rank,
                                      max_hidden=1024, timeout_ms=TIMEOUT_MS).destroy()
    except arfuse.ArfuseError as e:
        return type(e).__name__, e.message
    return "ok", ""


def test_ranks_with_different_configs_all_get_mismatch():
    results = run_ranks(_mismatch_worker, 2, timeout=DEADLINE)
    print(results)
    assert [r[0] for r in results] == ["Mismatch", "Mismatch"], results


# ---- torch: from_process_group over gloo -------------------------------------------------------------------
def _torch_worker(world, devices):
    import torch

    import arfuse.torch as at

    torch.cuda.set_device(devices[world.rank])
    world.init_dist("gloo")
    dev = torch.device("cuda", devices[world.rank])
    comm = at.from_process_group(device=dev, max_tokens=64, max_hidden=4096, timeout_ms=TIMEOUT_MS)
    tol = {torch.bfloat16: 2 ** -7, torch.float16: 2 ** -10, torch.float32: 2 ** -22}
    gen = torch.Generator().manual_seed(5)  # the same on every rank

    def inputs(tokens, hidden, dtype):
        def r(*shape):
            return (torch.randint(-32, 33, shape, generator=gen) / 8.0).to(dtype)
        xs = [r(tokens, hidden) for _ in range(world.nranks)]
        w = (1.0 + torch.randint(-4, 5, (hidden,), generator=gen) / 16.0).to(dtype)
        return [x.to(dev) for x in xs], r(tokens, hidden).to(dev), w.to(dev)

    def check(norm, res, xs, residual, weight):
        dt = residual.dtype
        want_res = (residual.double() + sum(x.double() for x in xs)).to(dt)
        rr = want_res.double()
        want_norm = (rr * torch.rsqrt(rr.pow(2).mean(-1, keepdim=True) + EPS) * weight.double()).to(dt)
        assert torch.equal(res, want_res)
        torch.testing.assert_close(norm.double(), want_norm.double(), rtol=tol[dt], atol=tol[dt] * 1e-3)
        return norm.view(torch.uint8).cpu().numpy().tobytes()

    out = {}
    try:
        assert (comm.rank, comm.nranks, comm.device) == (world.rank, world.nranks, dev.index)
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            xs, residual, weight = inputs(5, 1024, dtype)
            norm, res = at.all_reduce_add_rmsnorm(comm, xs[world.rank], residual, weight, EPS)
            torch.cuda.synchronize()
            out[f"eager {dtype}"] = check(norm, res, xs, residual, weight)
        xs, _, _ = inputs(7, 512, torch.float32)
        total = at.all_reduce(comm, xs[world.rank].clone())
        torch.cuda.synchronize()
        assert torch.equal(total, sum(x.double() for x in xs).float())
        assert at.counters().get(("all_reduce_add_rmsnorm", "torch"), 0) == 0

        # CUDA graph: each process captures its own rank's call, then replays on new data.
        xs, residual, weight = inputs(4, 2048, torch.bfloat16)
        x = xs[world.rank].clone()
        norm, res = torch.empty_like(x), torch.empty_like(x)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            at.all_reduce_add_rmsnorm(comm, x, residual, weight, EPS, norm, res)  # warm-up
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            torch.ops.arfuse.all_reduce_add_rmsnorm(comm.id, x, residual, weight, EPS, norm, res)
        for i in range(2):
            new_xs, new_res, new_w = inputs(4, 2048, torch.bfloat16)
            x.copy_(new_xs[world.rank])
            residual.copy_(new_res)
            weight.copy_(new_w)
            torch.cuda.synchronize()
            g.replay()
            torch.cuda.synchronize()
            out[f"graph {i}"] = check(norm, res, new_xs, new_res, new_w)

        # torch.compile (aot_eager: tracing is what is tested, and it keeps the ranks' start-up close).
        @torch.compile(fullgraph=True, backend="aot_eager")
        def layer(cid, x, residual, weight):
            n, r = at.all_reduce_add_rmsnorm(cid, x * 2, residual, weight, EPS)
            return n * 1, r

        xs, residual, weight = inputs(3, 1024, torch.float16)
        norm, res = layer(comm.id, xs[world.rank], residual, weight)
        torch.cuda.synchronize()
        out["compile"] = check(norm, res, [x * 2 for x in xs], residual, weight)

        # Fallback: 100 tokens > max_tokens=64 is beyond this communicator: torch serves it, logged once.
        before = at.counters().get(("all_reduce_add_rmsnorm", "torch"), 0)
        for _ in range(2):
            xs, residual, weight = inputs(100, 1024, torch.bfloat16)
            norm, res = at.all_reduce_add_rmsnorm(comm, xs[world.rank], residual, weight, EPS)
            torch.cuda.synchronize()
        assert at.counters()[("all_reduce_add_rmsnorm", "torch")] == before + 2
        out["fallback"] = check(norm, res, xs, residual, weight)
        assert at.choose(comm, "fused", 100, 1024, torch.bfloat16).path == "torch"
        assert at.choose(comm, "fused", 64, 1024, torch.bfloat16).path == "arfuse"
        # No communicator at all: the same definition over the group.
        norm, res = at.all_reduce_add_rmsnorm(None, xs[world.rank], residual, weight, EPS)
        torch.cuda.synchronize()
        out["none"] = check(norm, res, xs, residual, weight)
        assert comm.async_error() == arfuse.Result.Success
    finally:
        comm.destroy()
    return out


@pytest.mark.parametrize("placement", ["shared", "distinct"])
@pytest.mark.parametrize("nranks", [2, 3])
def test_from_process_group_gloo_against_fp64(nranks, placement):
    pytest.importorskip("torch", reason="torch is not installed: arfuse.torch multi-process tests need it")
    devices = _placement(placement, nranks)
    results = run_ranks(_torch_worker, nranks, (devices,), timeout=DEADLINE)
    for r in results[1:]:
        assert r == results[0], "ranks disagree bitwise"


# ---- the example --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gpus", ["shared", "distinct"])
def test_tp_decoder_example_with_two_processes(gpus):
    pytest.importorskip("torch", reason="torch is not installed: examples/tp_decoder.py needs it")
    _placement(gpus, 2)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PACKAGE_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, str(ROOT / "examples" / "tp_decoder.py"), "--nprocs", "2", "--gpus", gpus,
           "--layers", "2", "--hidden", "512", "--heads", "8", "--ffn", "1024", "--tokens", "8",
           "--require-arfuse", "--graph", "--arfuse-timeout-ms", str(TIMEOUT_MS), "--timeout", str(DEADLINE - 20)]
    r = run_command(cmd, timeout=DEADLINE, env=env)
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "arfuse run: arfuse (" in r.stdout and "0 by the torch fallback" in r.stdout
    assert "CUDA graph: captured the arfuse forward; 2 replays identical to each other" in r.stdout
    assert "PASS" in r.stdout
