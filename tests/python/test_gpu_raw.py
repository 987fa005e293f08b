"""GPU: the raw-pointer API with virtual ranks (several ranks on device 0), against an fp64 reference,
eager and under CUDA-graph capture. Skipped with the library's reason when no GPU is visible."""
import random

import pytest

import arfuse
from arfuse import Algo, DataType, Op
from gpu_util import Cuda, pack, random_values, reference, require_gpu, ulp_tolerance, unpack

EPS = 1e-6


@pytest.fixture(scope="module")
def cuda():
    require_gpu()
    return Cuda()


class Rank:
    """One rank's device buffers for a [tokens, hidden] fused call, and its stream."""

    def __init__(self, cuda, dtype, tokens, hidden):
        self.cuda, self.dtype, self.tokens, self.hidden = cuda, dtype, tokens, hidden
        self.nbytes = tokens * hidden * dtype.itemsize
        self.x, self.res, self.norm, self.rout = (cuda.malloc(self.nbytes) for _ in range(4))
        self.w = cuda.malloc(hidden * dtype.itemsize)
        self.stream = cuda.stream()

    def fused(self, comm, norm_out=None, residual_out=None):
        comm.all_reduce_add_rmsnorm(self.x, self.res, self.w, EPS, norm_out or self.norm, residual_out or self.rout,
                                    self.tokens, self.hidden, self.dtype, stream=self.stream)

    def free(self):
        for p in (self.x, self.res, self.norm, self.rout, self.w):
            self.cuda.rt.cudaFree(p)
        self.cuda.rt.cudaStreamDestroy(self.stream)


def _world(n, **kw):
    return arfuse.Communicator.init_all([0] * n, max_tokens=64, max_hidden=4096, timeout_ms=20000, **kw)


def _fill(cuda, ranks, rng, residual=None, weight=None):
    """New random x per rank; the same residual and weight on every rank (as in a TP model)."""
    r0 = ranks[0]
    n = r0.tokens * r0.hidden
    xs = [random_values(rng, n) for _ in ranks]
    residual = residual or random_values(rng, n)
    weight = weight or [1.0 + rng.randint(-4, 4) / 16.0 for _ in range(r0.hidden)]
    for rank, x in zip(ranks, xs):
        cuda.upload(rank.x, pack(rank.dtype, x))
        cuda.upload(rank.res, pack(rank.dtype, residual))
        cuda.upload(rank.w, pack(rank.dtype, weight))
    return xs, residual, weight


def _check(cuda, ranks, xs, residual, weight):
    r0 = ranks[0]
    want_norm, want_res = reference(r0.dtype, xs, residual, weight, EPS, r0.tokens, r0.hidden)
    first = None
    for rank in ranks:
        got_norm_b, got_res_b = cuda.download(rank.norm, rank.nbytes), cuda.download(rank.rout, rank.nbytes)
        if first is None:
            first = (got_norm_b, got_res_b)
        assert (got_norm_b, got_res_b) == first, "ranks disagree bitwise"
    got_norm, got_res = unpack(r0.dtype, first[0]), unpack(r0.dtype, first[1])
    assert got_res == want_res  # one rounding of an exact sum: no tolerance
    tol = ulp_tolerance(r0.dtype)
    bad = [(i, g, w) for i, (g, w) in enumerate(zip(got_norm, want_norm)) if abs(g - w) > tol * max(abs(w), 1e-3)]
    assert not bad, f"{len(bad)} norm_out values off by more than {tol:g} relative, first {bad[:3]}"


def test_virtual_rank_properties_and_plans(cuda):
    comms = _world(4)
    try:
        assert [c.rank for c in comms] == [0, 1, 2, 3]
        assert {c.nranks for c in comms} == {4}
        assert {c.device for c in comms} == {0}
        assert all(c.is_virtual for c in comms)
        assert comms[0].async_error() == arfuse.Result.Success
        plan = comms[0].query_plan(Op.AllReduceAddRmsNorm, 1, 4096, DataType.Bfloat16)
        assert plan.algo == Algo.LowLatency and plan.blocks >= 1 and plan.threads >= 32
        assert plan.reason.startswith("lowlatency")
        with pytest.raises(arfuse.Unsupported):
            comms[0].query_plan("fused", 1, 40000, "bf16")
        with pytest.raises(arfuse.InvalidArgument, match="tokens=65"):  # above max_tokens
            comms[0].query_plan("all_reduce", 65, 4096, "bf16")
    finally:
        arfuse.destroy_all(comms)
    assert all(c.destroyed for c in comms)
    arfuse.destroy_all(comms)  # idempotent


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("algo", [None, "oneshot", "twoshot", "lowlatency"])
@pytest.mark.parametrize("dtype", list(DataType))
def test_fused_against_fp64(cuda, n, algo, dtype):
    comms = _world(n, algo=algo)
    ranks = [Rank(cuda, dtype, 5, 1024) for _ in range(n)]
    try:
        xs, residual, weight = _fill(cuda, ranks, random.Random(n * 100 + int(dtype)))
        cuda.sync()
        for comm, rank in zip(comms, ranks):
            rank.fused(comm)
        for rank in ranks:
            cuda.sync(rank.stream)
        _check(cuda, ranks, xs, residual, weight)
        if algo is not None:
            assert comms[0].query_plan("fused", 5, 1024, dtype).algo == Algo.from_label(algo)
    finally:
        arfuse.destroy_all(comms)
        for r in ranks:
            r.free()


def test_all_reduce_in_place_is_exact(cuda):
    n, tokens, hidden, dt = 3, 7, 512, DataType.Float32
    comms = _world(n)
    ranks = [Rank(cuda, dt, tokens, hidden) for _ in range(n)]
    try:
        rng = random.Random(7)
        xs = [random_values(rng, tokens * hidden) for _ in range(n)]
        for rank, x in zip(ranks, xs):
            cuda.upload(rank.x, pack(dt, x))
        cuda.sync()
        for comm, rank in zip(comms, ranks):
            comm.all_reduce(rank.x, rank.x, tokens, hidden, dt, stream=rank.stream)
        want = [sum(v) for v in zip(*xs)]
        for rank in ranks:
            cuda.sync(rank.stream)
            assert unpack(dt, cuda.download(rank.x, rank.nbytes)) == want
    finally:
        arfuse.destroy_all(comms)
        for r in ranks:
            r.free()


@pytest.mark.parametrize("algo", ["oneshot", "twoshot", "lowlatency"])
def test_graph_capture_replays_with_new_inputs(cuda, algo):
    n, dt = 2, DataType.Bfloat16
    comms = _world(n, algo=algo)
    ranks = [Rank(cuda, dt, 4, 2048) for _ in range(n)]
    execs = []
    try:
        rng = random.Random(11)
        _fill(cuda, ranks, rng)
        cuda.sync()
        # Each rank's call is captured into its own graph on its own stream; capture launches nothing.
        for comm, rank in zip(comms, ranks):
            execs.append(cuda.capture(rank.stream, lambda c=comm, r=rank: r.fused(c)))
        for _ in range(3):
            xs, residual, weight = _fill(cuda, ranks, rng)
            cuda.sync()
            for exe, rank in zip(execs, ranks):
                cuda.ok(cuda.rt.cudaGraphLaunch(exe, rank.stream), "cudaGraphLaunch")
            for rank in ranks:
                cuda.sync(rank.stream)
            _check(cuda, ranks, xs, residual, weight)
        assert comms[0].async_error() == arfuse.Result.Success
    finally:
        for exe in execs:
            cuda.rt.cudaGraphExecDestroy(exe)
        arfuse.destroy_all(comms)
        for r in ranks:
            r.free()


def test_single_gpu_add_rmsnorm(cuda):
    dt = DataType.Float16
    rank = Rank(cuda, dt, 3, 256)
    try:
        xs, residual, weight = _fill(cuda, [rank], random.Random(3))
        cuda.sync()
        arfuse.add_rmsnorm(rank.x, rank.res, rank.w, EPS, rank.norm, rank.rout, 3, 256, dt, stream=rank.stream)
        cuda.sync(rank.stream)
        _check(cuda, [rank], xs, residual, weight)
    finally:
        rank.free()


def test_host_memory_is_refused_by_the_pointer_check(cuda):
    import ctypes

    buf = ctypes.create_string_buffer(5 * 512 + 16)
    base = (ctypes.addressof(buf) + 15) // 16 * 16
    p = [base + i * 512 for i in range(5)]
    with pytest.raises(arfuse.InvalidArgument, match="not device memory"):
        arfuse.add_rmsnorm(p[0], p[1], p[2], EPS, p[3], p[4], 2, 128, "bf16")


def test_context_manager_destroys(cuda):
    comms = _world(2)
    with comms[0] as c0, comms[1]:
        assert c0.nranks == 2
    assert comms[0].destroyed and comms[1].destroyed
    with pytest.raises(arfuse.InvalidUsage, match="was destroyed"):
        comms[0].query_plan("fused", 1, 1024, "bf16")
