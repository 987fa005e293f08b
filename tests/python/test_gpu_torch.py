"""GPU: arfuse.torch with virtual ranks on device 0 against an fp64 torch reference: eager, under
CUDA-graph capture with replays on new data, through torch.compile, and torch.library.opcheck.
Skipped with a printed reason when torch is missing or no GPU is visible to arfuse."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: arfuse.torch GPU tests need it")

import arfuse  # noqa: E402
import arfuse.torch as at  # noqa: E402
from gpu_util import require_gpu  # noqa: E402

EPS = 1e-6
TOL = {torch.bfloat16: 2 ** -7, torch.float16: 2 ** -10, torch.float32: 2 ** -22}


@pytest.fixture(scope="module", autouse=True)
def _gpu():
    require_gpu()
    if not torch.cuda.is_available():
        pytest.skip("arfuse sees a GPU but torch.cuda.is_available() is False (CPU-only torch build?)")


def _world(n, **kw):
    return arfuse.Communicator.init_all([0] * n, max_tokens=64, max_hidden=4096, timeout_ms=20000, **kw)


def _inputs(n, tokens, hidden, dtype, gen):
    """Per-rank x, a shared residual and weight: multiples of 1/8, exact in every dtype."""
    def r(*shape):
        return (torch.randint(-32, 33, shape, generator=gen) / 8.0).to(dtype).cuda()
    xs = [r(tokens, hidden) for _ in range(n)]
    return xs, r(tokens, hidden), (1.0 + torch.randint(-4, 5, (hidden,), generator=gen) / 16.0).to(dtype).cuda()


def _reference(xs, residual, weight):
    dt = residual.dtype
    res_out = (residual.double() + sum(x.double() for x in xs)).to(dt)
    r = res_out.double()
    norm = (r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + EPS) * weight.double()).to(dt)
    return norm, res_out


def _assert_matches(outs, xs, residual, weight):
    want_norm, want_res = _reference(xs, residual, weight)
    for norm, res in outs:
        assert torch.equal(norm, outs[0][0]) and torch.equal(res, outs[0][1]), "ranks disagree bitwise"
    torch.testing.assert_close(outs[0][1], want_res, rtol=0, atol=0)
    tol = TOL[residual.dtype]
    torch.testing.assert_close(outs[0][0].double(), want_norm.double(), rtol=tol, atol=tol * 1e-3)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("n", [2, 4])
def test_eager_fused(n, dtype):
    comms = _world(n)
    streams = [torch.cuda.Stream() for _ in range(n)]
    try:
        xs, residual, weight = _inputs(n, 5, 1024, dtype, torch.Generator().manual_seed(n))
        torch.cuda.synchronize()
        outs = []
        for comm, s, x in zip(comms, streams, xs):
            with torch.cuda.stream(s):
                outs.append(at.all_reduce_add_rmsnorm(comm, x, residual, weight, EPS))
        torch.cuda.synchronize()
        _assert_matches(outs, xs, residual, weight)
    finally:
        arfuse.destroy_all(comms)


def test_eager_all_reduce_in_place():
    comms = _world(3)
    streams = [torch.cuda.Stream() for _ in range(3)]
    try:
        xs, _, _ = _inputs(3, 7, 512, torch.float32, torch.Generator().manual_seed(5))
        want = sum(x.double() for x in xs).float()
        torch.cuda.synchronize()
        for comm, s, x in zip(comms, streams, xs):
            with torch.cuda.stream(s):
                assert at.all_reduce(comm, x, out=x) is x
        torch.cuda.synchronize()
        for x in xs:
            assert torch.equal(x, want)
    finally:
        arfuse.destroy_all(comms)


def test_wrong_device_or_shape_is_refused():
    comms = _world(2)
    try:
        x = torch.zeros(8, 64, dtype=torch.bfloat16, device="cuda")  # room for the 256-element slice below
        with pytest.raises(arfuse.InvalidArgument, match="x is on cpu"):
            at.all_reduce_add_rmsnorm(comms[0], x.cpu(), x, x[0], EPS)
        with pytest.raises(arfuse.InvalidArgument, match=r"residual_in has shape \(8, 32\)"):
            at.all_reduce_add_rmsnorm(comms[0], x, x[:, :32].contiguous(), x[0], EPS)
        with pytest.raises(arfuse.InvalidArgument, match="in=0x[0-9a-f]+ is not 16-byte aligned"):
            at.all_reduce(comms[0], x.view(-1)[4:260])  # contiguous, but 8 bytes into the storage
    finally:
        arfuse.destroy_all(comms)


@pytest.mark.parametrize("algo", [None, "oneshot", "twoshot", "lowlatency"])
def test_cuda_graph_capture_and_replay(algo):
    n, dtype = 2, torch.bfloat16
    comms = _world(n, algo=algo)
    streams = [torch.cuda.Stream() for _ in range(n)]
    gen = torch.Generator().manual_seed(42)
    try:
        xs, residual, weight = _inputs(n, 4, 2048, dtype, gen)
        outs = [(torch.empty_like(residual), torch.empty_like(residual)) for _ in range(n)]
        torch.cuda.synchronize()
        for comm, s, x, (norm, res) in zip(comms, streams, xs, outs):  # warm-up, eager
            with torch.cuda.stream(s):
                at.all_reduce_add_rmsnorm(comm, x, residual, weight, EPS, norm, res)
        torch.cuda.synchronize()
        graphs = []
        for comm, s, x, (norm, res) in zip(comms, streams, xs, outs):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):  # capture only: nothing runs, so one rank at a time is fine
                torch.ops.arfuse.all_reduce_add_rmsnorm(comm.id, x, residual, weight, EPS, norm, res)
            graphs.append(g)
        for _ in range(3):
            new_xs, new_res, new_w = _inputs(n, 4, 2048, dtype, gen)
            for x, nx in zip(xs, new_xs):
                x.copy_(nx)
            residual.copy_(new_res)
            weight.copy_(new_w)
            torch.cuda.synchronize()
            for g, s in zip(graphs, streams):
                with torch.cuda.stream(s):
                    g.replay()
            torch.cuda.synchronize()
            _assert_matches(outs, xs, residual, weight)
        assert comms[0].async_error() == arfuse.Result.Success
    finally:
        arfuse.destroy_all(comms)


# torch.compile of the custom ops is tested with one process per rank (test_gpu_multiprocess.py,
# passed on an H200). Not here: with virtual ranks driven by one thread, compiling the second rank's
# graph may synchronise the device while the first rank's kernel waits for the second rank's call,
# which only times out (seen on an H200: a 20 s arfusePeerTimeout). arfuse refuses the related
# deadlock it can see (two ranks on one stream); a device-wide synchronise it cannot see.
def test_single_gpu_add_rmsnorm_and_opcheck():
    xs, residual, weight = _inputs(1, 6, 768, torch.bfloat16, torch.Generator().manual_seed(1))
    norm, res = at.add_rmsnorm(xs[0], residual, weight, EPS)
    torch.cuda.synchronize()
    _assert_matches([(norm, res)], xs, residual, weight)
    if not hasattr(torch.library, "opcheck"):
        pytest.skip(f"torch {torch.__version__} has no torch.library.opcheck")
    torch.library.opcheck(torch.ops.arfuse.add_rmsnorm.default,
                          (xs[0], residual, weight, EPS, torch.empty_like(norm), torch.empty_like(res)))
    (comm,) = arfuse.Communicator.init_all([0], max_tokens=64, max_hidden=4096)
    try:
        assert comm.query_plan("fused", 6, 768, "bf16").algo == arfuse.Algo.Local
        torch.library.opcheck(torch.ops.arfuse.all_reduce_add_rmsnorm.default,
                              (comm.id, xs[0], residual, weight, EPS, torch.empty_like(norm), torch.empty_like(res)))
        torch.library.opcheck(torch.ops.arfuse.all_reduce.default, (comm.id, xs[0], torch.empty_like(norm)))
    finally:
        comm.destroy()
