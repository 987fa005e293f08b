"""arfuse.torch across processes without a GPU (gloo on CPU tensors): the torch fallback against an
fp64 reference and bitwise-equal on every rank, logged once; the process group's all-gather feeding
the C callback; from_process_group giving every rank the same outcome (the stub library stands in for
the native part); and examples/tp_decoder.py on CPU (baseline vs the fallback). Every spawned process
is joined against a deadline and killed on failure (mp_util.run_ranks). Skipped without torch."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: arfuse.torch tests need it (pip install torch)")
dist = pytest.importorskip("torch.distributed", reason="this torch build has no torch.distributed")
if not dist.is_available():
    pytest.skip("this torch build has no torch.distributed", allow_module_level=True)

from conftest import PACKAGE_DIR, ROOT, run_python  # noqa: E402
from mp_util import run_command, run_ranks  # noqa: E402
from stub_util import build_multiprocess_stub  # noqa: E402

EPS = 1e-6
TOL = {torch.bfloat16: 2 ** -7, torch.float16: 2 ** -10, torch.float32: 2 ** -22}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _inputs(nranks, tokens, hidden, dtype, seed=1234):
    """Every rank's x, the shared residual and weight (multiples of 1/8: exact sums), the same on
    every rank since the generator is seeded alike."""
    gen = torch.Generator().manual_seed(seed)

    def r(*shape):
        return (torch.randint(-32, 33, shape, generator=gen) / 8.0).to(dtype)

    xs = [r(tokens, hidden) for _ in range(nranks)]
    return xs, r(tokens, hidden), (1.0 + torch.randint(-4, 5, (hidden,), generator=gen) / 16.0).to(dtype)


def _reference(xs, residual, weight):
    dt = residual.dtype
    res = (residual.double() + sum(x.double() for x in xs)).to(dt)
    r = res.double()
    return (r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + EPS) * weight.double()).to(dt), res


class _Records:
    def __init__(self):
        import logging

        self.lines = []
        handler = logging.Handler()
        handler.emit = lambda rec: self.lines.append(rec.getMessage())
        logging.getLogger("arfuse.torch").addHandler(handler)


# ---- workers (module level: spawned processes import them) -------------------------------------------------
def _fallback_worker(world, dtype_name, tokens, hidden):
    import arfuse.torch as at

    world.init_dist()
    records = _Records()
    dtype = DTYPES[dtype_name]
    xs, residual, weight = _inputs(world.nranks, tokens, hidden, dtype)
    want_norm, want_res = _reference(xs, residual, weight)
    x = xs[world.rank].clone()
    norm, res = at.all_reduce_add_rmsnorm(None, x, residual, weight, EPS)
    assert torch.equal(x, xs[world.rank]), "the input was written"
    assert torch.equal(res, want_res)  # exact inputs: one rounding of an exact sum
    torch.testing.assert_close(norm.double(), want_norm.double(), rtol=TOL[dtype], atol=TOL[dtype] * 1e-3)
    # In place, as an engine calls it (norm_out=x, residual_out=residual), on the leading dims [2, tokens/2].
    x3, res3 = x.view(2, tokens // 2, hidden), residual.clone().view(2, tokens // 2, hidden)
    at.all_reduce_add_rmsnorm(None, x3, res3, weight, EPS, norm_out=x3, residual_out=res3)
    assert torch.equal(x3.view(tokens, hidden), norm) and torch.equal(res3.view(tokens, hidden), res)
    total = at.all_reduce(None, xs[world.rank])
    assert torch.equal(total, sum(t.double() for t in xs).to(dtype))
    return {"norm": norm.contiguous().view(torch.uint8).numpy().tobytes(),
            "logs": records.lines, "counts": at.counters()}


def _gather_worker(world):
    import ctypes

    import arfuse.torch as at
    from arfuse._rendezvous import AllGatherBridge

    world.init_dist()
    bridge = AllGatherBridge(at.process_group_all_gather(), world.nranks, world.rank)
    mine = bytes([65 + world.rank]) * 5 + b"\0"
    src, dst = ctypes.create_string_buffer(mine, 6), ctypes.create_string_buffer(6 * world.nranks)
    addr = ctypes.cast(bridge.c_fn, ctypes.c_void_p).value
    fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)(addr)
    rc = fn(None, ctypes.addressof(src), ctypes.addressof(dst), 6)
    return rc, dst.raw, repr(bridge.error)


def _from_group_worker(world, device, bad_rank):
    import arfuse
    import arfuse.torch as at

    world.init_dist()
    records = _Records()
    kwargs = {"dtypes": ["int8"]} if world.rank == bad_rank else {"dtypes": ["bf16"]}
    try:
        comm = arfuse.Communicator.from_process_group(device=device, max_tokens=64, **kwargs)  # = at.from_...
    except (arfuse.ArfuseError, arfuse.ArfuseLibraryError) as e:
        outcome = (type(e).__name__, str(e))
    else:
        outcome = ("ok", hex(comm.handle), comm.fallback_group is dist.group.WORLD)
        comm.destroy()
    again = at.try_from_process_group(device=device, max_tokens=64, **kwargs)
    third = at.try_from_process_group(device=device, max_tokens=64, **kwargs)  # the same reason is logged once
    for c in (again, third):
        if c is not None:
            c.destroy()
    return outcome, again is None, records.lines


# ---- tests ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("nranks, dtype_name", [(2, "bf16"), (3, "fp16"), (2, "fp32")])
def test_fallback_matches_fp64_and_is_identical_on_every_rank(nranks, dtype_name):
    results = run_ranks(_fallback_worker, nranks, (dtype_name, 6, 64), timeout=120)
    assert all(r["norm"] == results[0]["norm"] for r in results), "ranks disagree bitwise"
    for r in results:
        assert r["counts"] == {("all_reduce_add_rmsnorm", "torch"): 2, ("all_reduce", "torch"): 1}
        fused = [line for line in r["logs"] if "all_reduce_add_rmsnorm" in line]
        assert len(fused) == 1, r["logs"]  # twice called, logged once
        assert "runs on torch.distributed.all_reduce + add + RMSNorm in fp32, not arfuse: no arfuse communicator" \
            in fused[0]


def test_process_group_all_gather_feeds_the_c_callback():
    results = run_ranks(_gather_worker, 3, timeout=120)
    assert results == [(0, b"AAAAA\0BBBBB\0CCCCC\0", "None")] * 3


def test_from_process_group_same_outcome_on_every_rank(lib):
    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU: the outcome without one is tested on CPU-only machines")
    from arfuse._lib import MULTI_PROCESS

    results = run_ranks(_from_group_worker, 2, (0, None), timeout=120)
    if not all(lib.has(n) for n in MULTI_PROCESS):
        # A library without the native part: every rank says so, nobody waits inside the library.
        for outcome, none, logs in results:
            assert outcome[0] == "ArfuseLibraryError", outcome
            assert "has no symbol arfuseCommInitRankWithAllGather" in outcome[1]
            assert none and len(logs) == 1 and "no arfuse communicator for this process group" in logs[0]
        return
    # The real library, no GPU: its init runs through the group's all-gather and is all-or-nothing, so
    # rank 1 reports the failure of rank 0 (the lowest failing rank) too.
    for rank, (outcome, none, logs) in enumerate(results):
        assert outcome[0] == "NoDevice", outcome
        assert outcome[1].startswith(f"arfuseNoDevice: arfuseCommInitRankWithAllGather (rank {rank} of 2): rank 0: ")
        assert none and len(logs) == 1 and "no arfuse communicator for this process group" in logs[0]


def test_from_process_group_through_the_stub(tmp_path):
    stub = build_multiprocess_stub(tmp_path)
    env = {"ARFUSE_LIBRARY_PATH": stub}
    results = run_ranks(_from_group_worker, 2, (0, None), timeout=120, env=env)
    assert [r[0] for r in results] == [("ok", "0x2000", True), ("ok", "0x2001", True)]  # handle = 0x2000 + rank
    assert all(r[1] is False and r[2] == [] for r in results)
    # Rank 1's config is refused before the library is called: rank 0 hears why, nobody hangs.
    results = run_ranks(_from_group_worker, 2, (0, 1), timeout=120, env=env)
    (o0, none0, logs0), (o1, none1, logs1) = results
    assert o1[0] == "InvalidArgument" and "dtypes='int8'" in o1[1]
    assert o0[0] == "InvalidArgument"
    assert o0[1].startswith("arfuseInvalidArgument: from_process_group: rank 1 of the group cannot create its "
                            "arfuse communicator: dtypes='int8'")
    assert none0 and none1 and len(logs0) == 1 and len(logs1) == 1


def test_from_process_group_without_a_gpu_reports_no_device(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU: the no-device path is tested on CPU-only machines")
    stub = build_multiprocess_stub(tmp_path)
    results = run_ranks(_from_group_worker, 2, (None, None), timeout=120, env={"ARFUSE_LIBRARY_PATH": stub})
    for outcome, none, _ in results:
        assert outcome[0] == "NoDevice" and "torch sees no CUDA device" in outcome[1], outcome
        assert none


def test_choose_and_the_fallback_log_through_the_stub(tmp_path):
    stub = build_multiprocess_stub(tmp_path)
    r = run_python("""
        import logging
        import torch
        import arfuse
        import arfuse.torch as at
        from arfuse._torch_fallback import note
        lines = []
        handler = logging.Handler()
        handler.emit = lambda rec: lines.append(rec.getMessage())
        logging.getLogger("arfuse.torch").addHandler(handler)
        comm = arfuse.Communicator.init_rank(3, arfuse.get_unique_id(), 2, 5, max_tokens=64)
        print("A", at.choose(comm, "fused", 64, 1024, torch.bfloat16))
        c = at.choose(comm, "fused", 100, 1024, torch.bfloat16)
        print("B", c.path, type(c.error).__name__, c.reason)
        c = at.choose(comm, arfuse.Op.AllReduce, 1, 40000, torch.float32)
        print("C", c.path, type(c.error).__name__)
        print("D", at.choose(comm, "fused", 1, 1024, torch.float64))
        print("E", at.choose(None, "fused", 1, 1024, torch.bfloat16))
        for tokens in (100, 200, 300, 64):
            note(comm, arfuse.Op.AllReduceAddRmsNorm, at.choose(comm, "fused", tokens, 1024, torch.bfloat16), tokens,
                 1024, torch.bfloat16)
        print("LOGS", lines)
        print("COUNTS", sorted(at.counters().items()))
        comm.destroy()
        try:
            at.choose(comm, "fused", 64, 1024, torch.bfloat16)
        except arfuse.InvalidUsage as e:
            print("DESTROYED", e)
    """, env_update={"ARFUSE_LIBRARY_PATH": stub}, drop=("ARFUSE_LIBRARY",))
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    assert "A Choice(path='arfuse', reason='oneshot: stub plan for 64 tokens', error=None)" in out
    assert ("B torch InvalidArgument arfuseInvalidArgument: arfuseCommQueryPlan: tokens=100 exceeds this "
            "communicator's maxTokens=64") in out
    assert "C torch Unsupported" in out
    assert "D Choice(path='torch', reason='dtype torch.float64: arfuse serves bf16, fp16 and fp32', error=None)" in out
    assert "E Choice(path='torch', reason='no arfuse communicator', error=None)" in out
    logs = eval(out.split("LOGS ", 1)[1].splitlines()[0])
    assert len(logs) == 1, logs  # three token counts beyond the limit, one cause: logged once
    assert logs[0].startswith("arfuse.torch: all_reduce_add_rmsnorm (tokens=100 hidden=1024 torch.bfloat16, "
                              "communicator id=1 rank=0/0) runs on torch.distributed.all_reduce + add + RMSNorm "
                              "in fp32, not arfuse: arfuseInvalidArgument: arfuseCommQueryPlan: tokens=100 exceeds")
    assert "COUNTS [(('all_reduce_add_rmsnorm', 'arfuse'), 1), (('all_reduce_add_rmsnorm', 'torch'), 3)]" in out
    assert "DESTROYED arfuseInvalidUsage: communicator id=1 was destroyed" in out


def test_tp_decoder_example_on_cpu_uses_the_fallback():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PACKAGE_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    r = run_command([sys.executable, str(ROOT / "examples" / "tp_decoder.py"), "--nprocs", "2", "--device", "cpu",
                     "--layers", "2", "--hidden", "256", "--tokens", "8", "--timeout", "120"], timeout=200, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "arfuse run: torch fallback" in r.stdout, r.stdout
    assert "PASS" in r.stdout


def test_tp_decoder_example_help():
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "tp_decoder.py"), "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "--nprocs" in r.stdout and "--require-arfuse" in r.stdout
