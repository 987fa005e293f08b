"""The SGLang plugin inside the REAL SGLang Python modules, in 2 gloo processes on CPU, for two
versions on either side of the (None, None) contract:

  0.5.11  the trap: a declined call would leave the input un-reduced, so the plugin never declines.
          Gate communicator.apply_flashinfer_allreduce_fusion, setup ModelRunner's method.
  0.5.23  decline-safe: after (None, None) the caller all-reduces by itself. Gate
          layer_boundary.residual.add_norm.flashinfer_ar_fusion_applies (and the bindings the layer
          boundary imported from it), setup BaseRunner's method, groups from get_parallel() (the
          runtime context, published from a ServerArgs), the layer-boundary calls
          fused_ffn_input / fused_attn_input.

Each: SGLang's own load_plugins() discovers the plugin through an entry point, its HookRegistry
applies the hooks, the setup hook runs as the runner's patched method, the gate is asked at several
token counts and the call is RMSNorm.forward_with_allreduce_fusion through SGLang's
_forward_with_allreduce_fusion (both groups on 0.5.23). The reference is the engine's own unfused
ops (GroupCoordinator.all_reduce, then RMSNorm.forward_native). Here the arfuse calls are the FAKE
backend's (integration_fake.py); test_gpu_integration_sglang.py runs the same worker with arfuse
(0.5.11).

Each version comes from $ARFUSE_SGLANG_SITE (folders holding sglang and its dependencies, joined by
':'; several versions: such lists joined by ';', each version taking the list whose sglang dist-info
is that version), else from its wheel folder (scripts/fetch_engine_wheels.sh: .whl/ for 0.5.11,
--sglang 0.5.23: .whl-sglang-0.5.23/; CPython 3.12 wheels) installed offline under the build folder.
Each is skipped with the reason when its SGLang is not there or does not import in this Python.
"""
import inspect
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
TOKENS = (1, 3, MAX_TOKENS, MAX_TOKENS + 5)  # the last: above the decode size (never declined on 0.5.11)
VERSIONS = ("0.5.11", "0.5.23")
# Where each version's wheels are looked for without ARFUSE_SGLANG_SITE, and how they are fetched.
SOURCES = {"0.5.11": (".whl", "bash scripts/fetch_engine_wheels.sh"),
           "0.5.23": (".whl-sglang-0.5.23", "bash scripts/fetch_engine_wheels.sh --sglang 0.5.23")}


def _site_version(paths):
    """The version of the first sglang dist-info found in `paths` (None when there is none)."""
    for p in paths:
        for di in sorted(Path(p).glob("sglang-*.dist-info")):
            return di.name[len("sglang-"):-len(".dist-info")]
    return None


def engine_paths(version="0.5.11"):
    """sys.path entries that hold SGLang `version` and its dependencies, or pytest.skip with the reason."""
    folder, fetch = SOURCES[version]
    env = os.environ.get("ARFUSE_SGLANG_SITE", "")
    if env.strip():
        sites = [[p for p in site.split(os.pathsep) if p] for site in env.split(";") if site.strip()]
        held = {_site_version(site): site for site in reversed(sites)}
        if version not in held:
            pytest.skip(f"ARFUSE_SGLANG_SITE holds no SGLang {version} (sglang dist-info found: "
                        f"{', '.join(str(v) for v in held)}): add its folders after a ';'")
        paths = held[version]
    else:
        whl = ROOT / folder
        wheels = sorted(whl.glob("*.whl")) if whl.is_dir() else []
        if not any(w.name.startswith(f"sglang-{version}-") for w in wheels):
            pytest.skip(f"SGLang {version} is not here: run `{fetch}` (CPython 3.12 wheels into {folder}/) or set "
                        f"ARFUSE_SGLANG_SITE to folders holding sglang and its dependencies")
        py = f"py{sys.version_info.major}{sys.version_info.minor}"
        site = LIBRARY.parent.parent / (f"engine-site-{py}" if version == "0.5.11" else f"engine-site-{version}-{py}")
        stamp = site / ".installed"
        if not stamp.exists():
            r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                                "--disable-pip-version-check", "--target", str(site)] + [str(w) for w in wheels],
                               capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                last = (r.stderr.strip().splitlines() or ["?"])[-1]
                pytest.skip(f"cannot install {folder}/ for Python {sys.version_info.major}.{sys.version_info.minor} "
                            f"(the wheels are CPython 3.12 ones): {last}")
            stamp.write_text("ok\n")
        paths = [str(site)]
    probe = subprocess.run([sys.executable, "-c", "import sglang.srt.plugins, sglang.srt.layers.layernorm"],
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(paths + [str(PACKAGE_DIR)])},
                           capture_output=True, text=True, timeout=300)
    if probe.returncode != 0 and not any(f"No module named '{m}" in probe.stderr for m in ABSENT + SLIMMED):
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"SGLang {version} does not import from {paths}: {last}")
    return paths


def stub_missing(folder, pkgs, paths=None):
    """An ABSENT stub package in `folder` for each of `pkgs` that cannot be imported from `paths` (default
    sys.path): the wheel sets leave them out on purpose (see ABSENT and SLIMMED below)."""
    import importlib.machinery
    import importlib.util
    for pkg in pkgs:
        found = importlib.machinery.PathFinder.find_spec(pkg, paths) if paths is not None else \
            importlib.util.find_spec(pkg)
        if found is None:
            (Path(folder) / pkg).mkdir()
            (Path(folder) / pkg / "__init__.py").write_text(_ABSENT.replace("PKG", pkg))


ABSENT = ("sgl_kernel", "flashinfer")  # CUDA-only imports of SGLang that the test does not bring
# Imported at SGLang's import (sglang.srt.utils.common: decode_jpeg, Image) but used only for image
# inputs: left out of the GPU machine's wheel set to keep it small (scripts/fetch_engine_wheels.sh).
SLIMMED = ("torchvision", "PIL")
_ABSENT = '''\
"""ABSENT MODULE, written by arfuse's test: PKG is not on this machine (sgl_kernel is a 326 MB wheel,
flashinfer needs its cubins; torchvision and PIL serve image inputs only). SGLang imports names from it;
the test never calls them (its
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
    stub_missing(tmp, SLIMMED + (ABSENT if backend == "arfuse" else ()))
    if backend == "arfuse":
        os.environ["SGLANG_IS_FLASHINFER_AVAILABLE"] = "false"  # what SGLang checks; true here
    os.environ.update({"ARFUSE_SGLANG": "1", "ARFUSE_SGLANG_MAX_TOKENS": str(MAX_TOKENS), "SGLANG_PLUGINS": "arfuse"})


def _coordinator(ps, ranks_list, name):
    """A GroupCoordinator over gloo with every engine communicator off (pynccl, custom all-reduce,
    ...: their names differ per version, all are use_* flags)."""
    params = inspect.signature(ps.GroupCoordinator.__init__).parameters
    off = {p: False for p in params if p.startswith("use_")}
    return ps.GroupCoordinator(group_ranks=ranks_list, local_rank=0, torch_distributed_backend="gloo",
                               group_name=name, **off)


def _pack(t):
    return str(t.dtype), t.detach().float().cpu().tolist()


def _engine_0_5_11(world, ps):
    """The TP engine of a dense model as 0.5.11 reads it (parallel_state's globals): attention TP =
    TP, no EP. Returns the tp coordinator, the patched setup, the gate functions by where they are
    read, and the engine's workspace setups as recorded (None: not recorded)."""
    n = world.nranks
    tp = _coordinator(ps, [list(range(n))], "tp")
    ones = _coordinator(ps, [[r] for r in range(n)], "ep")
    ps._TP = ps._ATTN_TP = ps._MOE_TP = tp
    ps._MOE_EP = ones
    from sglang.srt.layers import communicator
    from sglang.srt.model_executor.model_runner import ModelRunner

    return tp, ModelRunner._pre_initialize_flashinfer_allreduce_workspace, {
        "communicator": communicator.apply_flashinfer_allreduce_fusion}, None


def _engine_0_5_23(world, ps):
    """The same engine as 0.5.23 reads it: widths from a published ServerArgs (no model is loaded),
    groups and ranks stamped into get_parallel() as initialize_model_parallel does (which would also
    build pynccl, a CUDA-only communicator). The gate is read where the layer boundary reads it too.
    Configured as SGLang configures itself on SM90 / SM100 for the common models: a FlashInfer fusion
    backend, and the groups tagged by its own _tag_groups_for_flashinfer_allreduce_only (their plain
    all-reduces use FlashInfer's workspace; without it, and off a GPU, they fall back to gloo). The
    engine's workspace setup is recorded (each call's hidden size and dtype), not run."""
    from sglang.srt.runtime_context import get_context, get_parallel
    from sglang.srt.server_args import ServerArgs

    n, r = world.nranks, world.rank
    get_context().set_server_args(ServerArgs(model_path="arfuse-test-no-model", tp_size=n, device="cpu"))
    tp = _coordinator(ps, [list(range(n))], "tp")
    ones = _coordinator(ps, [[i] for i in range(n)], "ep")
    get_parallel().override_permanently(tp_group=tp, attn_tp_group=tp, moe_tp_group=tp, moe_ep_group=ones,
                                        tp_rank=r, attn_tp_rank=r, attn_dp_rank=0, attn_cp_rank=0, moe_ep_rank=0,
                                        moe_dp_rank=0, moe_tp_rank=r, pp_rank=0)
    get_context().override("arfuse-test", flashinfer_allreduce_fusion_backend="trtllm")
    ps._ATTN_TP, ps._MOE_TP, ps._MOE_EP = tp, tp, ones
    ps.set_flashinfer_allreduce_only(True)
    ps._tag_groups_for_flashinfer_allreduce_only()
    import sglang.srt.layers.flashinfer_comm_fusion as fc

    made = []
    fc.pre_initialize_workspaces = lambda **kw: made.append((kw["hidden_dim"], str(kw["dtype"])))
    from sglang.srt.layers.layer_boundary import exit as boundary_exit
    from sglang.srt.layers.layer_boundary.fusions import allreduce
    from sglang.srt.layers.layer_boundary.residual import add_norm
    from sglang.srt.model_executor.runner.base_runner import BaseRunner

    return tp, BaseRunner._pre_initialize_flashinfer_allreduce_workspace, {
        "add_norm": add_norm.flashinfer_ar_fusion_applies, "exit": boundary_exit.flashinfer_ar_fusion_applies,
        "fusions.allreduce": allreduce.flashinfer_ar_fusion_applies}, made


def _boundary_0_5_23(norm, x, residual):
    """0.5.23's layer-boundary entries that call the fused op, the gate first: attention -> FFN
    (attention TP group) and the previous layer's MoE output -> attention (post-experts group).
    Each gives (norm, residual), or None when the gate says no (the engine then runs its own path)."""
    from types import SimpleNamespace

    from sglang.srt.layers.layer_boundary.fusions.allreduce import fused_attn_input, fused_ffn_input
    from sglang.srt.layers.layer_boundary.output import UnreducedOutput
    from sglang.srt.layers.moe.utils import post_experts_reduction_group

    plan = SimpleNamespace(norm=norm)
    ffn = fused_ffn_input(plan, x.clone(), residual.clone(), None)
    owed = UnreducedOutput(partial=x.clone(), group=post_experts_reduction_group())
    attn = fused_attn_input(plan, owed, residual.clone(), None, None, fuses_quant=False, keep_bf16=False)
    return {"ffn": ffn, "attn": attn}


def rank_setup(world, backend):
    """This rank's device (all ranks on cuda:0 for "arfuse", the CPU for "fake"), the FAKE backend
    when asked, the plugin's log lines captured (the list returned), and the gloo world."""
    import logging

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
    return device, lines


def engine_worker(world, paths, backend, version="0.5.11"):
    """One rank: SGLang's plugin loading, the patched setup, gate and layer-boundary calls. backend:
    "fake" (CPU, the FAKE backend) or "arfuse" (the GPU, all ranks on cuda:0; run for 0.5.11)."""
    from types import SimpleNamespace

    _prepare(world, paths, backend)
    device, lines = rank_setup(world, backend)
    from arfuse.integrations import _glue

    import sglang.srt.plugins as plugins
    from sglang.srt.plugins.hook_registry import HookRegistry

    plugins.load_plugins()  # SGLang's own: entry point -> register() -> HookRegistry -> apply_hooks()
    import arfuse.integrations.sglang as plugin

    patched = sorted(HookRegistry._patched)
    from sglang.srt.distributed import parallel_state as ps

    tp, setup, gates, engine_setup = (_engine_0_5_11 if version == "0.5.11" else _engine_0_5_23)(world, ps)
    from sglang.srt.layers.layernorm import RMSNorm

    # The fields the setup hook reads from a runner and its ModelRunner (a real one needs a model on
    # disk); 0.5.11's hook is ModelRunner's own method, 0.5.14+'s the runner's, which holds it.
    mr = SimpleNamespace(model_config=SimpleNamespace(hidden_size=HIDDEN), dtype=torch.bfloat16,
                         server_args=SimpleNamespace(cuda_graph_bs=[1, 2, 4, 8],
                                                     enable_flashinfer_allreduce_fusion=False))
    setup(mr if version == "0.5.11" else SimpleNamespace(model_runner=mr))  # patched: arfuse's setup
    f = plugin.fusion()
    out = {"patched": patched, "active": bool(f and f.active), "decline_safe": bool(f and f.decline_safe),
           "gate": {where: [bool(g(t)) for t in (0, 1, MAX_TOKENS, 9, 4096)] for where, g in gates.items()},
           "engine_setup": engine_setup, "hint": getattr(tp, "_fi_workspace_hint", None)}
    if not out["active"]:
        return {**out, "lines": lines}  # check() reports why; calling the op now would run FlashInfer's
    from integration_fake import seeded

    groups = (True,) if version == "0.5.11" else (True, False)  # use_attn_tp_group: TP, post-experts
    cases, boundary, kept = {}, {}, {}
    for tokens in TOKENS:
        x, residual, weight = seeded(world.rank, tokens, HIDDEN, torch.bfloat16, seed=100 + tokens)
        x, residual = x.to(device), residual.to(device)
        norm = RMSNorm(HIDDEN, eps=1e-6).to(device=device, dtype=torch.bfloat16)
        norm.weight.data.copy_(weight.to(device))
        ref_x = tp.all_reduce(x.clone())  # the engine's own unfused ops
        ref_norm, ref_res = norm.forward_native(ref_x, residual.clone())
        for attn in groups:
            r_in = residual.clone()
            got_norm, got_res = norm.forward_with_allreduce_fusion(x.clone(), r_in, use_attn_tp_group=attn)
            cases[(tokens, attn)] = [_pack(t) for t in (got_norm, got_res, ref_norm, ref_res)]
            # a fresh residual, the input one untouched (0.5.23's layer boundary counts on it:
            # flashinfer_preserves_residual, true wherever the gate is)
            kept[(tokens, attn)] = torch.equal(r_in, residual) and got_res.data_ptr() != r_in.data_ptr()
        if version != "0.5.11":
            boundary[tokens] = {k: v and [_pack(t) for t in (*v, ref_norm, ref_res)]
                                for k, v in _boundary_0_5_23(norm, x, residual).items()}
    out["cases"], out["boundary"], out["kept"] = cases, boundary, kept
    if backend == "arfuse":
        out["graph"] = _graph_replay(world, tp, device)
    before = _glue.counters()
    out["compiled"] = _compiled(world, tp, device)
    out["compiled_counters"] = {"/".join(k): v - before.get(k, 0) for k, v in _glue.counters().items()
                                if v != before.get(k, 0)}
    # What SGLang's own caller does with a declined call: 0.5.11 normalises the un-reduced input (the
    # trap), 0.5.23 all-reduces first.
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
    declined = norm.forward_with_allreduce_fusion(x.to(device), residual.to(device))[1]
    fc.flashinfer_allreduce_residual_rmsnorm = saved
    out["declined_residual"] = _pack(declined)
    out["counters"] = {"/".join(k): v for k, v in _glue.counters().items()}
    out["lines"] = lines
    return out


COMPILED_TOKENS = (2, MAX_TOKENS + 3)  # within the decode size, and above it


def _compiled(world, tp, device):
    """The hooked layer under torch.compile(fullgraph=True): SGLang's RMSNorm.forward_with_allreduce_fusion
    traced whole (the plugin's call is one arfuse_sglang op with a fake implementation; aot_eager runs
    the fake implementations while tracing, then the ops). Above the decode size a compiled call cannot
    decline: the group's all-reduce + add+RMSNorm. (got_norm, got_res, ref_norm, ref_res) per token count."""
    from integration_fake import seeded

    from sglang.srt.layers.layernorm import RMSNorm

    torch._dynamo.reset()
    out = {}
    for tokens in COMPILED_TOKENS:
        x, residual, weight = seeded(world.rank, tokens, HIDDEN, torch.bfloat16, seed=400 + tokens)
        x, residual = x.to(device), residual.to(device)
        norm = RMSNorm(HIDDEN, eps=1e-6).to(device=device, dtype=torch.bfloat16)
        norm.weight.data.copy_(weight.to(device))
        layer = torch.compile(lambda a, r: norm.forward_with_allreduce_fusion(a, r), fullgraph=True,
                              backend="aot_eager", dynamic=False)
        with torch.no_grad():  # as SGLang runs its models (no autograd graph: the op has no backward)
            got_norm, got_res = layer(x.clone(), residual.clone())
        ref_norm, ref_res = norm.forward_native(tp.all_reduce(x.clone()), residual.clone())
        out[tokens] = [_pack(t) for t in (got_norm, got_res, ref_norm, ref_res)]
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


_OP = "sglang.srt.layers.flashinfer_comm_fusion.flashinfer_allreduce_residual_rmsnorm"
_SETUP = "_pre_initialize_flashinfer_allreduce_workspace"
EXPECT = {  # per version: the hooks patched, whether declining is safe, the gate's bindings
    "0.5.11": ({_OP, "sglang.srt.layers.communicator.apply_flashinfer_allreduce_fusion",
                "sglang.srt.model_executor.model_runner.ModelRunner." + _SETUP}, False, ("communicator",)),
    "0.5.23": ({_OP, "sglang.srt.layers.layer_boundary.residual.add_norm.flashinfer_ar_fusion_applies",
                "sglang.srt.model_executor.runner.base_runner.BaseRunner." + _SETUP},
               True, ("add_norm", "exit", "fusions.allreduce")),
}


def _close(got_norm, got_res, ref_norm, ref_res, what):
    assert torch.allclose(got_res.float(), ref_res.float(), rtol=1e-2, atol=2e-2), what
    assert torch.allclose(got_norm.float(), ref_norm.float(), rtol=2e-2, atol=3e-2), what


def _same_on_every_rank(per_rank, what):
    for got in per_rank:
        assert torch.equal(got[0], per_rank[0][0]) and torch.equal(got[1], per_rank[0][1]), what


def check(results, nranks, backend, version="0.5.11"):
    """What both the CPU (fake) and the GPU (arfuse) runs must show."""
    from integration_fake import seeded

    targets, safe, bindings = EXPECT[version]
    for res in results:
        assert res["active"] is True, (res["lines"], res["patched"])
        assert res["decline_safe"] is safe  # 0.5.11: the plugin must never return (None, None)
        assert targets <= set(res["patched"]), res["patched"]
        # arfuse's part of the gate: 1..MAX_TOKENS; above that the engine's own gate (False off SM90/SM100),
        # the same wherever the engine reads it and on every rank
        assert res["gate"] == {b: [False, True, True, False, False] for b in bindings}, res["gate"]
        assert all(res["kept"].values()), res["kept"]
        if version != "0.5.11":
            # the engine's plain all-reduces run in FlashInfer's workspace here: its setup ran once, as
            # without arfuse (the fused calls are arfuse's all the same)
            assert res["hint"] == "attn_tp" and res["engine_setup"] == [(HIDDEN, "torch.bfloat16")], res
    info = [line for res in results for line in res["lines"] if line.startswith("arfuse INFO sglang")]
    assert len(info) == 1 and f"({nranks} ranks, " in info[0] and f"up to {MAX_TOKENS} tokens" in info[0], info
    unpack = lambda p: torch.tensor(p[1]).to(getattr(torch, p[0].replace("torch.", "")))  # noqa: E731
    for key in results[0]["cases"]:
        per_rank = [[unpack(p) for p in res["cases"][key]] for res in results]
        for got in per_rank:
            _close(*got, key)
        _same_on_every_rank(per_rank, key)
    for tokens, entries in results[0]["boundary"].items():  # 0.5.23's layer-boundary entries
        for entry in entries:
            got = [res["boundary"][tokens][entry] for res in results]
            if tokens > MAX_TOKENS:
                assert got == [None] * nranks, (tokens, entry)  # the gate closed: the engine's own path
                continue
            per_rank = [[unpack(p) for p in g] for g in got]
            for g in per_rank:
                _close(*g, (tokens, entry))
            _same_on_every_rank(per_rank, (tokens, entry))
    for tokens in results[0]["compiled"]:
        per_rank = [[unpack(p) for p in res["compiled"][tokens]] for res in results]
        for got in per_rank:
            _close(*got, ("compiled", tokens))
        _same_on_every_rank(per_rank, ("compiled", tokens))
    for res in results:  # compiled: served by arfuse within the decode size, never declined above it
        assert res["compiled_counters"] == {"sglang/tp/arfuse": 1, "sglang/tp/engine-all-reduce": 1}, res
    if backend == "arfuse":
        per_rank = [[unpack(p) for p in res["graph"]] for res in results]
        for got in per_rank:
            _close(*got, "graph replay")
        _same_on_every_rank(per_rank, "graph replay")
        assert all("sm_" in line for line in info), info
    # SGLang's caller after (None, None): 0.5.11 keeps the local residual (the trap), 0.5.23 the sum
    xs, residual, _ = seeded(None, 2, HIDDEN, torch.bfloat16, seed=7)
    total = sum(x.float() for x in xs[:nranks])
    for r, res in enumerate(results):
        want = residual.float() + (total if safe else xs[r].float())
        assert torch.allclose(unpack(res["declined_residual"]).float(), want, rtol=1e-2, atol=2e-2), (version, r)
    within, above = len([t for t in TOKENS if t <= MAX_TOKENS]), len([t for t in TOKENS if t > MAX_TOKENS])
    for res in results:
        c = {k: v - res["compiled_counters"].get(k, 0) for k, v in res["counters"].items()}
        c = {k: v for k, v in c.items() if v}  # the eager calls (the compiled ones are checked above)
        if version == "0.5.11":
            fused = within + (2 if backend == "arfuse" else 0)  # + warm-up, capture
            assert c == {"sglang/tp/arfuse": fused, "sglang/tp/engine-all-reduce": above}, c
        else:  # each group: the direct calls and the boundary entry within; the direct ones above declined
            assert c == {"sglang/tp/arfuse": 2 * within, "sglang/tp/declined": above,
                         "sglang/post-experts/arfuse": 2 * within, "sglang/post-experts/declined": above}, c


@pytest.mark.parametrize("version", VERSIONS)
def test_sglang_real_modules_fake_backend(version):
    paths = engine_paths(version)
    results = run_ranks(engine_worker, 2, (paths, "fake", version), timeout=600)
    check(results, 2, "fake", version)


PROBED = {"0.5.11": ("communicator.apply_flashinfer_allreduce_fusion", "model_runner.ModelRunner.", "False"),
          "0.5.23": ("layer_boundary.residual.add_norm.flashinfer_ar_fusion_applies", "base_runner.BaseRunner.",
                     "True")}


@pytest.mark.parametrize("version", VERSIONS)
def test_probe_reads_the_installed_engine(version, tmp_path):
    paths = engine_paths(version)
    stub_missing(tmp_path, SLIMMED, paths)  # the GPU machine's wheel set has no PIL: SGLang imports it
    code = textwrap.dedent("""
        from arfuse.integrations import sglang as p
        s = p.probe()
        print(s.op, s.gate, s.setup, s.decline_safe, s.missing)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(paths + [str(tmp_path), str(PACKAGE_DIR)])})
    assert r.returncode == 0, r.stderr[-2000:]
    op, gate, setup, safe, missing = r.stdout.strip().splitlines()[-1].split(" ", 4)
    want_gate, want_setup, want_safe = PROBED[version]
    assert gate.endswith(want_gate) and want_setup in setup, r.stdout
    assert safe == want_safe and missing == "[]", r.stdout
