"""The engine plugins' glue (arfuse.integrations._glue) in real gloo processes on CPU: ranks agree,
a rank that cannot serve makes every rank leave the engine as it was, equal groups share one
communicator, each call takes the path its token count decides (the same on every rank), and the
fallback never declines where declining is unsafe. The arfuse calls are the FAKE backend's
(integration_fake.py: no arfuse call); one test uses the real library, which without a GPU must
fail closed on every rank. Skipped without torch."""
import logging
import os

import pytest

from conftest import PACKAGE_DIR, run_python

torch = pytest.importorskip("torch", reason="torch is not installed: the plugin glue tests need it (pip install torch)")
dist = pytest.importorskip("torch.distributed", reason="this torch build has no torch.distributed")

from mp_util import run_ranks  # noqa: E402

HIDDEN = 64


def _groups(world, names=("tp", "post-experts")):
    from arfuse.integrations._glue import Group

    def all_reduce(x):
        s = x.float()
        dist.all_reduce(s)
        return s.to(x.dtype)

    g = dist.group.WORLD
    return [Group(n, tuple(range(world.nranks)), world.rank, world.nranks, g, all_reduce) for n in names]


class _Log(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _capture():
    h = _Log()
    lg = logging.getLogger("arfuse.integrations")
    lg.addHandler(h)
    lg.setLevel(logging.INFO)
    return h


def _pack(t):
    # tensors cross the result queue as exact Python floats (a torch tensor would travel as a shared
    # memory handle that dies with the worker)
    return str(t.dtype), t.float().tolist()


def _unpack(p):
    return torch.tensor(p[1], dtype=torch.float32).to(getattr(torch, p[0].replace("torch.", "")))


# ---- workers (module level: spawned processes import them) -----------------------------------------------
def _agree_worker(world):
    world.init_dist()
    from arfuse.integrations._glue import agree

    mine = "cannot" if world.rank == 1 else None
    return agree(dist.group.WORLD, mine), agree(dist.group.WORLD, None)


def _setup_worker(world, fail_ranks, decline_safe):
    world.init_dist()
    from integration_fake import FakeBackend

    from arfuse.integrations import _glue

    backend = FakeBackend(tuple(fail_ranks))
    _glue.set_backend(backend)
    log = _capture()
    f = _glue.Fusion("test-engine", decline_safe)
    active = f.setup(_groups(world), dist.group.WORLD, 8, HIDDEN, torch.bfloat16)
    return {"active": active, "created": len(backend.created), "destroyed": len(backend.destroyed),
            "opens": [f.opens(t) for t in (0, 1, 8, 9)], "log": log.lines}


def _serve_worker(world, decline_safe):
    world.init_dist()
    from integration_fake import FakeBackend, seeded

    from arfuse.integrations import _glue

    _glue.set_backend(FakeBackend())
    _glue.reset_counters()
    f = _glue.Fusion("test-engine", decline_safe)
    assert f.setup(_groups(world), dist.group.WORLD, 8, HIDDEN, torch.bfloat16)
    out = {}
    for tokens in (1, 8, 9, 33):
        x, residual, weight = seeded(world.rank, tokens, HIDDEN, torch.bfloat16, seed=tokens)
        r = f.serve("tp", x.clone(), residual, weight, 1e-6)
        out[tokens] = None if r is None else (_pack(r[0]), _pack(r[1]))
    out["unknown"] = f.serve("no-such-group", x, residual, weight, 1e-6) is _glue.NOT_OURS
    # a dtype mix (fp32 weight with bf16 rows) is not arfuse's: the fallback serves it
    x, residual, weight = seeded(world.rank, 2, HIDDEN, torch.bfloat16, seed=2)
    r = f.serve("tp", x.clone(), residual, weight.float(), 1e-6)
    out["mixed"] = None if r is None else (_pack(r[0]), _pack(r[1]))
    out["counters"] = _glue.counters()
    return out


def _real_backend_worker(world):
    world.init_dist()
    from arfuse.integrations import _glue

    _glue.set_backend(None)  # the real ArfuseBackend: arfuse.torch.from_process_group over gloo
    log = _capture()
    f = _glue.Fusion("test-engine", False)
    active = f.setup(_groups(world, ("tp",)), dist.group.WORLD, 8, HIDDEN, torch.bfloat16)
    return active, log.lines


# ---- tests -------------------------------------------------------------------------------------------------
def test_agree_gives_every_rank_the_same_answer():
    results = run_ranks(_agree_worker, 3, timeout=120)
    assert results == [("rank 1: cannot", None)] * 3


@pytest.mark.parametrize("fail_ranks", [(1,), (0, 2)])
def test_one_rank_that_cannot_serve_leaves_every_rank_as_it_was(fail_ranks):
    results = run_ranks(_setup_worker, 3, (fail_ranks, False), timeout=120)
    for r, res in enumerate(results):
        assert res["active"] is False and res["opens"] == [False] * 4, (r, res)
        assert res["destroyed"] == res["created"], (r, res)  # nothing left behind
    warns = [line for res in results for line in res["log"] if "WARN" in line]
    assert len(warns) == 1 and f"rank {min(fail_ranks)}: tp group" in warns[0], warns  # one line, from rank 0
    assert "FAKE: rank" in warns[0] and "engine keeps its own all-reduce" in warns[0]


def test_equal_groups_share_one_communicator_and_startup_says_what_runs():
    results = run_ranks(_setup_worker, 2, ((), False), timeout=120)
    for res in results:
        assert res["active"] is True and res["created"] == 1 and res["destroyed"] == 0
        assert res["opens"] == [False, True, True, False]  # 1..max_tokens, the same on every rank
    assert results[1]["log"] == []  # the line comes from rank 0 only
    (line,) = results[0]["log"]
    assert line.startswith("arfuse INFO test-engine: fused AR+RMSNorm on tp/post-experts group (2 ranks, FAKE cpu")
    assert "fake-small <= 4 tokens, fake-large <= 8; the engine's own path above 8 tokens" in line


@pytest.mark.parametrize("decline_safe", [False, True])
def test_each_call_takes_the_path_its_size_decides(decline_safe):
    from integration_fake import fp64_reference, seeded

    nranks = 3
    results = run_ranks(_serve_worker, nranks, (decline_safe,), timeout=180)
    for tokens in (1, 8, 9, 33):
        xs, residual, weight = seeded(None, tokens, HIDDEN, torch.bfloat16, seed=tokens)
        ref_norm, ref_res = fp64_reference(xs[:nranks], residual, weight, 1e-6)
        outs = [None if res[tokens] is None else tuple(map(_unpack, res[tokens])) for res in results]
        if tokens > 8 and decline_safe:
            assert all(o is None for o in outs)  # handed back to the engine
            continue
        for norm, res in outs:
            assert norm.dtype == torch.bfloat16 and res.dtype == torch.bfloat16
            assert torch.allclose(res.double(), ref_res, rtol=1e-2, atol=1e-2)
            assert torch.allclose(norm.double(), ref_norm, rtol=2e-2, atol=2e-2)
            assert torch.equal(norm, outs[0][0]) and torch.equal(res, outs[0][1])  # bitwise equal on every rank
    for res in results:
        assert res["unknown"] is True
        c = res["counters"]
        assert c[("test-engine", "tp", "arfuse")] == 2
        fallback = "declined" if decline_safe else "engine-all-reduce"
        assert c[("test-engine", "tp", fallback)] == 3  # 9 and 33 tokens, and the dtype mix
        if decline_safe:
            assert res["mixed"] is None
        else:
            xs, residual, weight = seeded(None, 2, HIDDEN, torch.bfloat16, seed=2)
            ref_norm, _ = fp64_reference(xs[:nranks], residual, weight.float(), 1e-6)
            assert torch.allclose(_unpack(res["mixed"][0]).double(), ref_norm, rtol=2e-2, atol=2e-2)


def test_the_real_library_without_a_gpu_fails_closed_on_every_rank(lib):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the fail-closed path is the no-GPU one")
    results = run_ranks(_real_backend_worker, 2, timeout=120)
    assert [a for a, _ in results] == [False, False]
    warns = [line for _, lines in results for line in lines]
    assert len(warns) == 1 and "arfuse not used" in warns[0], warns
    assert "NoDevice" in warns[0] or "ArfuseLibraryError" in warns[0], warns


def test_env_flag_and_sizes(monkeypatch):
    from arfuse.integrations import _glue

    for v, want in (("1", True), ("true", True), ("ON", True), ("0", False), ("", False)):
        monkeypatch.setenv("ARFUSE_TEST_FLAG", v)
        assert _glue.env_flag("ARFUSE_TEST_FLAG") is want
    log = _capture()
    monkeypatch.setenv("ARFUSE_TEST_FLAG", "maybe")
    assert _glue.env_flag("ARFUSE_TEST_FLAG") is False
    assert any("ARFUSE_TEST_FLAG='maybe' is not understood" in line for line in log.lines)
    monkeypatch.setenv("ARFUSE_TEST_TOKENS", "-3")
    with pytest.raises(ValueError, match="ARFUSE_TEST_TOKENS='-3': expected a positive number of tokens"):
        _glue.env_positive_int("ARFUSE_TEST_TOKENS")
    monkeypatch.setenv("ARFUSE_TEST_TOKENS", "96")
    assert _glue.env_positive_int("ARFUSE_TEST_TOKENS") == 96
    assert _glue.token_ladder(96) == [1, 2, 4, 8, 16, 32, 64, 96]


def test_plugins_do_nothing_unless_asked():
    # no variable: register() returns before importing an engine (neither is installed here)
    r = run_python("""
        import sys
        from arfuse.integrations import sglang, vllm
        sglang.register(); vllm.register()
        assert "sglang" not in sys.modules and "vllm" not in sys.modules and "torch" not in sys.modules
        print("untouched")
    """, drop=("ARFUSE_SGLANG", "ARFUSE_VLLM"))
    assert r.returncode == 0 and "untouched" in r.stdout, r.stderr
    # asked for, with no engine installed: one WARN, no exception (the engine would still start)
    r = run_python("""
        import importlib.util, sys
        if importlib.util.find_spec("sglang") or importlib.util.find_spec("vllm"):
            print("SKIP engine installed"); sys.exit(0)
        from arfuse.integrations import sglang, vllm
        sglang.register(); vllm.register()
        print("survived")
    """, env_update={"ARFUSE_SGLANG": "1", "ARFUSE_VLLM": "1"})
    if "SKIP" in r.stdout:
        pytest.skip("an engine is installed in this Python: the no-engine path cannot be shown here")
    assert r.returncode == 0 and "survived" in r.stdout, r.stderr
    assert "arfuse WARN sglang" in r.stderr and "nothing patched" in r.stderr, r.stderr
    assert "arfuse WARN vllm: arfuse pass not installed" in r.stderr, r.stderr
    assert os.path.isdir(PACKAGE_DIR / "arfuse" / "integrations")
