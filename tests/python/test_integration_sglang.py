"""The SGLang plugin inside the REAL SGLang Python modules (0.5.11, a version with the (None, None)
trap), in 2 gloo processes on CPU: SGLang's own load_plugins() discovers the plugin through an entry
point, its HookRegistry applies the hooks, the setup hook runs as ModelRunner's patched method, the
gate is communicator.apply_flashinfer_allreduce_fusion and the call is RMSNorm.forward_with_allreduce_fusion
through SGLang's _forward_with_allreduce_fusion. The reference is the engine's own unfused ops
(GroupCoordinator.all_reduce, then RMSNorm.forward_native). Here the arfuse calls are the FAKE
backend's (integration_fake.py); test_gpu_integration_sglang.py runs the same worker with arfuse.

SGLang comes from $ARFUSE_SGLANG_SITE (folders holding sglang and its dependencies, joined by ':'),
else from .whl/ (scripts/fetch_engine_wheels.sh, CPython 3.12 wheels) installed offline under the
build folder; skipped with the reason when neither serves this Python.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import LIBRARY, PACKAGE_DIR, ROOT

torch = pytest.importorskip("torch", reason="torch is not installed: the SGLang plugin tests need it")
pytest.importorskip("torch.distributed", reason="this torch build has no torch.distributed")

from mp_util import run_ranks  # noqa: E402

HIDDEN = 256
MAX_TOKENS = 8
TOKENS = (1, 3, MAX_TOKENS, MAX_TOKENS + 5)  # the last: above the decode size, never declined on 0.5.11


def engine_paths():
    """sys.path entries that hold SGLang 0.5.11 and its dependencies, or pytest.skip with the reason."""
    env = os.environ.get("ARFUSE_SGLANG_SITE")
    if env:
        paths = [p for p in env.split(os.pathsep) if p]
    else:
        wheels = sorted((ROOT / ".whl").glob("*.whl")) if (ROOT / ".whl").is_dir() else []
        if not any(w.name.startswith("sglang-0.5.11-") for w in wheels):
            pytest.skip("SGLang 0.5.11 is not here: run `bash scripts/fetch_engine_wheels.sh` (CPython 3.12 wheels "
                        "into .whl/) or set ARFUSE_SGLANG_SITE to folders holding sglang and its dependencies")
        site = LIBRARY.parent.parent / f"engine-site-py{sys.version_info.major}{sys.version_info.minor}"
        stamp = site / ".installed"
        if not stamp.exists():
            r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                                "--disable-pip-version-check", "--target", str(site)] + [str(w) for w in wheels],
                               capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                last = (r.stderr.strip().splitlines() or ["?"])[-1]
                pytest.skip(f"cannot install .whl/ for Python {sys.version_info.major}.{sys.version_info.minor} "
                            f"(the wheels are CPython 3.12 ones): {last}")
            stamp.write_text("ok\n")
        paths = [str(site)]
    probe = subprocess.run([sys.executable, "-c", "import sglang.srt.plugins, sglang.srt.layers.layernorm"],
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(paths + [str(PACKAGE_DIR)])},
                           capture_output=True, text=True, timeout=300)
    if probe.returncode != 0 and "sgl_kernel" not in probe.stderr:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"SGLang does not import from {paths}: {last}")
    return paths


ABSENT = ("sgl_kernel", "flashinfer")  # CUDA-only imports of SGLang that the test does not bring
_ABSENT = '''\
"""ABSENT MODULE, written by arfuse's test: PKG is not on this machine (sgl_kernel is a 326 MB wheel,
flashinfer needs its cubins). SGLang imports names from it on CUDA; the test never calls them (its
reference is SGLang's forward_native, its fused path is arfuse): anything called from here, or from
a submodule, raises."""
import importlib.abc
import importlib.machinery
import sys
import types


class _Absent:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Absent(self._name + "." + attr)

    def __call__(self, *args, **kwargs):
        raise RuntimeError("PKG: " + self._name + " called, but PKG is absent in this test")

    def __repr__(self):
        return "<absent PKG " + self._name + ">"


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Absent(name)


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name.startswith("PKG."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = types.ModuleType(spec.name, "absent PKG submodule (arfuse test)")
        m.__path__ = []
        m.__getattr__ = __getattr__
        return m

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Submodules())


def _placeholder_ops():
    # SGLang registers fake (meta) implementations of sgl_kernel's torch ops at import on CUDA, which
    # needs the ops to exist: define each name its sources register, with a placeholder schema and
    # no kernel (a call fails in the dispatcher).
    import importlib.util
    import os
    import re

    import torch

    spec = importlib.util.find_spec("sglang")
    names = set()
    for root in spec.submodule_search_locations or []:
        for d, _, files in os.walk(root):
            for f in files:
                if f.endswith(".py"):
                    with open(os.path.join(d, f), errors="replace") as fh:
                        names |= set(re.findall(r"sgl_kernel::(\\w+)", fh.read()))
    lib = torch.library.Library("sgl_kernel", "FRAGMENT")
    for n in sorted(names):
        try:
            lib.define(n + "(Tensor x) -> Tensor")
        except RuntimeError:
            pass  # already defined
    return lib


_LIB = _placeholder_ops() if "PKG" == "sgl_kernel" else None
'''


def _prepare(world, paths, backend):
    """Puts SGLang and an entry point for arfuse's plugin on sys.path (a dist-info as pip would
    write), and, on a GPU without sgl_kernel, the labelled absent module."""
    import importlib.util
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix=f"arfuse-ep-{world.rank}-"))
    di = tmp / "arfuse_engine_test-0.0.dist-info"
    di.mkdir()
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: arfuse-engine-test\nVersion: 0.0\n")
    (di / "entry_points.txt").write_text("[sglang.srt.plugins]\narfuse = arfuse.integrations.sglang:register\n")
    for p in reversed(paths):
        sys.path.insert(0, p)
    sys.path.insert(0, str(tmp))
    if backend == "arfuse":
        for pkg in ABSENT:
            if importlib.util.find_spec(pkg) is None:
                (tmp / pkg).mkdir()
                (tmp / pkg / "__init__.py").write_text(_ABSENT.replace("PKG", pkg))
        os.environ["SGLANG_IS_FLASHINFER_AVAILABLE"] = "false"  # what SGLang checks; true here
    os.environ.update({"ARFUSE_SGLANG": "1", "ARFUSE_SGLANG_MAX_TOKENS": str(MAX_TOKENS), "SGLANG_PLUGINS": "arfuse"})


def _coordinator(ps, ranks_list, name):
    return ps.GroupCoordinator(group_ranks=ranks_list, local_rank=0, torch_distributed_backend="gloo",
                               use_pynccl=False, use_pymscclpp=False, use_custom_allreduce=False,
                               use_torch_symm_mem_all_reduce=False, use_hpu_communicator=False,
                               use_xpu_communicator=False, use_npu_communicator=False, group_name=name)


def _pack(t):
    return str(t.dtype), t.detach().float().cpu().tolist()


def engine_worker(world, paths, backend):
    """One rank: SGLang's plugin loading, the patched setup, gate and layer-boundary calls. backend:
    "fake" (CPU, the FAKE backend) or "arfuse" (the GPU, all ranks on cuda:0)."""
    import logging
    from types import SimpleNamespace

    _prepare(world, paths, backend)
    device = "cpu"
    if backend == "arfuse":
        torch.cuda.set_device(0)
        device = "cuda:0"
    from arfuse.integrations import _glue

    if backend == "fake":
        from integration_fake import FakeBackend

        _glue.set_backend(FakeBackend())
    lines = []

    class H(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logging.getLogger("arfuse.integrations").addHandler(H())
    logging.getLogger("arfuse.integrations").setLevel(logging.INFO)
    world.init_dist("gloo")
    n = world.nranks

    import sglang.srt.plugins as plugins
    from sglang.srt.plugins.hook_registry import HookRegistry

    plugins.load_plugins()  # SGLang's own: entry point -> register() -> HookRegistry -> apply_hooks()
    import arfuse.integrations.sglang as plugin

    patched = sorted(HookRegistry._patched)
    from sglang.srt.distributed import parallel_state as ps

    tp = _coordinator(ps, [list(range(n))], "tp")
    ones = _coordinator(ps, [[r] for r in range(n)], "ep")
    ps._TP = ps._ATTN_TP = ps._MOE_TP = tp  # the TP engine of a dense model: attention TP = TP, no EP
    ps._MOE_EP = ones

    from sglang.srt.layers import communicator
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.model_executor.model_runner import ModelRunner

    # The fields the setup hook reads from a ModelRunner (a real one needs a model on disk).
    runner = SimpleNamespace(model_config=SimpleNamespace(hidden_size=HIDDEN), dtype=torch.bfloat16,
                             server_args=SimpleNamespace(cuda_graph_bs=[1, 2, 4, 8],
                                                           enable_flashinfer_allreduce_fusion=False))
    ModelRunner._pre_initialize_flashinfer_allreduce_workspace(runner)  # patched: arfuse's setup
    f = plugin.fusion()
    out = {"patched": patched, "active": bool(f and f.active), "decline_safe": bool(f and f.decline_safe),
           "gate": [bool(communicator.apply_flashinfer_allreduce_fusion(t)) for t in (0, 1, MAX_TOKENS, 9, 4096)]}
    if not out["active"]:
        return {**out, "lines": lines}  # check() reports why; calling the op now would run FlashInfer's
    from integration_fake import seeded

    cases = {}
    for tokens in TOKENS:
        x, residual, weight = seeded(world.rank, tokens, HIDDEN, torch.bfloat16, seed=100 + tokens)
        x, residual = x.to(device), residual.to(device)
        norm = RMSNorm(HIDDEN, eps=1e-6).to(device=device, dtype=torch.bfloat16)
        norm.weight.data.copy_(weight.to(device))
        got_norm, got_res = norm.forward_with_allreduce_fusion(x.clone(), residual.clone())
        ref_x = tp.all_reduce(x.clone())  # the engine's own unfused ops
        ref_norm, ref_res = norm.forward_native(ref_x, residual.clone())
        cases[tokens] = [_pack(t) for t in (got_norm, got_res, ref_norm, ref_res)]
    out["cases"] = cases
    if backend == "arfuse":
        out["graph"] = _graph_replay(world, tp, device)
    # The trap, shown with SGLang's own caller: an op that declines leaves the input un-reduced.
    import sglang.srt.layers.flashinfer_comm_fusion as fc

    saved = fc.flashinfer_allreduce_residual_rmsnorm
    fc.flashinfer_allreduce_residual_rmsnorm = lambda **kw: (None, None)
    x, residual, weight = seeded(world.rank, 2, HIDDEN, torch.bfloat16, seed=7)
    norm = RMSNorm(HIDDEN, eps=1e-6).to(device=device, dtype=torch.bfloat16)
    norm.weight.data.copy_(weight.to(device))
    if backend == "arfuse":
        # SGLang's CUDA forward needs sgl_kernel, which this test does not bring: its native forward
        # stands in. The trap is in the caller (it normalises the un-reduced input), not in the kernel.
        norm._forward_method = norm.forward_native
    trap = norm.forward_with_allreduce_fusion(x.to(device), residual.to(device))[1]
    fc.flashinfer_allreduce_residual_rmsnorm = saved
    out["trap_residual"] = _pack(trap)
    out["counters"] = {"/".join(k): v for k, v in _glue.counters().items()}
    out["lines"] = lines
    return out


def _graph_replay(world, tp, device):
    """The fused call captured in a CUDA graph (the plugin decides at capture) and replayed on new
    inputs: (got_norm, got_res, ref_norm, ref_res) of the replay, the reference taken eagerly."""
    from integration_fake import seeded

    from sglang.srt.layers.layernorm import RMSNorm

    x0, r0, weight = seeded(world.rank, 3, HIDDEN, torch.bfloat16, seed=300)
    norm = RMSNorm(HIDDEN, eps=1e-6).to(device=device, dtype=torch.bfloat16)
    norm.weight.data.copy_(weight.to(device))
    x, residual = x0.to(device), r0.to(device)
    norm.forward_with_allreduce_fusion(x.clone(), residual.clone())  # warm-up outside the graph
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        got_norm, got_res = norm.forward_with_allreduce_fusion(x, residual)
    x1, r1, _ = seeded(world.rank, 3, HIDDEN, torch.bfloat16, seed=301)
    x.copy_(x1.to(device))
    residual.copy_(r1.to(device))
    g.replay()
    torch.cuda.synchronize()
    ref_norm, ref_res = norm.forward_native(tp.all_reduce(x1.to(device)), r1.to(device))
    return [_pack(t) for t in (got_norm, got_res, ref_norm, ref_res)]


def check(results, nranks, backend):
    """What both the CPU (fake) and the GPU (arfuse) runs must show."""
    from integration_fake import seeded

    for res in results:
        assert res["active"] is True, (res["lines"], res["patched"])
        assert res["decline_safe"] is False  # 0.5.11: the plugin must never return (None, None)
        assert {"sglang.srt.layers.flashinfer_comm_fusion.flashinfer_allreduce_residual_rmsnorm",
                "sglang.srt.layers.communicator.apply_flashinfer_allreduce_fusion",
                "sglang.srt.model_executor.model_runner.ModelRunner._pre_initialize_flashinfer_allreduce_workspace",
                } <= set(res["patched"])
        # arfuse's part of the gate: 1..MAX_TOKENS; above that the engine's own gate (False off SM90/SM100)
        assert res["gate"] == [False, True, True, False, False], res["gate"]
    info = [line for res in results for line in res["lines"] if line.startswith("arfuse INFO sglang")]
    assert len(info) == 1 and f"({nranks} ranks, " in info[0] and f"up to {MAX_TOKENS} tokens" in info[0], info
    unpack = lambda p: torch.tensor(p[1]).to(getattr(torch, p[0].replace("torch.", "")))  # noqa: E731
    for tokens in TOKENS:
        per_rank = [[unpack(p) for p in res["cases"][tokens]] for res in results]
        for got_norm, got_res, ref_norm, ref_res in per_rank:
            assert torch.allclose(got_res.float(), ref_res.float(), rtol=1e-2, atol=2e-2), tokens
            assert torch.allclose(got_norm.float(), ref_norm.float(), rtol=2e-2, atol=3e-2), tokens
            assert torch.equal(got_norm, per_rank[0][0]) and torch.equal(got_res, per_rank[0][1])
    if backend == "arfuse":
        per_rank = [[unpack(p) for p in res["graph"]] for res in results]
        for got_norm, got_res, ref_norm, ref_res in per_rank:
            assert torch.allclose(got_res.float(), ref_res.float(), rtol=1e-2, atol=2e-2), "graph replay"
            assert torch.allclose(got_norm.float(), ref_norm.float(), rtol=2e-2, atol=3e-2), "graph replay"
            assert torch.equal(got_norm, per_rank[0][0]) and torch.equal(got_res, per_rank[0][1])
        assert all("sm_" in line for line in info), info
    # the trap is real: a declined call's residual is the local one, not the sum
    xs, residual, _ = seeded(None, 2, HIDDEN, torch.bfloat16, seed=7)
    for r, res in enumerate(results):
        trap = unpack(res["trap_residual"])
        assert torch.allclose(trap.float(), (residual.float() + xs[r].float()), rtol=1e-2, atol=2e-2)
    for res in results:
        c = res["counters"]
        fused = len([t for t in TOKENS if t <= MAX_TOKENS]) + (2 if backend == "arfuse" else 0)  # + warm-up, capture
        assert c.get("sglang/tp/arfuse") == fused, c
        assert c.get("sglang/tp/engine-all-reduce") == len([t for t in TOKENS if t > MAX_TOKENS]), c
        assert "sglang/tp/declined" not in c, c


def test_sglang_0_5_11_real_modules_fake_backend():
    paths = engine_paths()
    results = run_ranks(engine_worker, 2, (paths, "fake"), timeout=600)
    check(results, 2, "fake")


def test_probe_reads_the_installed_engine():
    paths = engine_paths()
    code = textwrap.dedent("""
        from arfuse.integrations import sglang as p
        s = p.probe()
        print(s.op, s.gate, s.setup, s.decline_safe, s.missing)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(paths + [str(PACKAGE_DIR)])})
    assert r.returncode == 0, r.stderr[-2000:]
    op, gate, setup, safe, missing = r.stdout.strip().split(" ", 4)
    assert gate.endswith("communicator.apply_flashinfer_allreduce_fusion") and "ModelRunner" in setup
    assert safe == "False" and missing == "[]", r.stdout
