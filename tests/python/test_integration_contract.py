"""Source contracts of the engine plugins against the real released wheels (no engine import, no torch).

Each wheel is fetched with `pip download --no-deps` (cached under the build folder: $ARFUSE_ENGINE_WHEELS,
else .whl/ of the checkout when it holds the wheel, else <build>/engine-wheels) and its modules are
read with zipfile + ast: every name the plugins patch, call or probe must exist with the parameters
they use, and what they infer from the code (is declining safe?) must hold per version. Skipped with
the reason when the registry cannot be reached. The versions are pinned: the latest of each engine
on 2026-12-01 (SGLang 0.5.23, vLLM 0.33.0) and the SGLang releases where the shape changed.
"""
import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import LIBRARY, PACKAGE_DIR, ROOT

sys.path.insert(0, str(PACKAGE_DIR))
from arfuse.integrations import sglang as plugin  # noqa: E402  (stdlib only: no torch, no engine)

# version -> (gate, setup, decline_safe, group resolution)
SGLANG = {
    "0.5.11": (plugin.GATES[2], plugin.SETUPS[1], False, "getters"),
    "0.5.14": (plugin.GATES[2], plugin.SETUPS[0], False, "getters"),
    "0.5.20": (plugin.GATES[2], plugin.SETUPS[0], False, "getters"),
    "0.5.21": (plugin.GATES[1], plugin.SETUPS[0], True, "resolve_fusion_group"),
    "0.5.22": (plugin.GATES[0], plugin.SETUPS[0], True, "resolve_fusion_group"),
    "0.5.23": (plugin.GATES[0], plugin.SETUPS[0], True, "resolve_fusion_group"),
}
VLLM = "0.33.0"
# Tags of a manylinux x86_64 CPython 3.12 wheel: the Python sources are the same in every build.
_TAGS = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"] + [
    x for p in ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
    for x in ("--platform", p)]


def _cache() -> Path:
    env = os.environ.get("ARFUSE_ENGINE_WHEELS")
    if env:
        return Path(env)
    return LIBRARY.parent.parent / "engine-wheels"  # <build>/src/libarfuse.so -> <build>/engine-wheels


def _wheel(name: str, version: str) -> Path:
    stem = f"{name.replace('-', '_')}-{version}-"
    for d in (ROOT / ".whl", _cache()):
        hits = sorted(d.glob(stem + "*.whl")) if d.is_dir() else []
        if hits:
            return hits[0]
    d = _cache()
    d.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check", "-d", str(d),
           f"{name}=={version}"] + _TAGS
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        pytest.skip(f"pip download {name}=={version} took over 900 s: the registry is too slow from here")
    hits = sorted(d.glob(stem + "*.whl"))
    if r.returncode != 0 or not hits:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"cannot download {name}=={version} from the package registry ({last}): "
                    f"put the wheel in {d} or .whl/ to run this contract test offline")
    return hits[0]


class Wheel:
    def __init__(self, path: Path):
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())
        self._trees = {}

    def module(self, dotted: str) -> ast.Module:
        for p in (dotted.replace(".", "/") + ".py", dotted.replace(".", "/") + "/__init__.py"):
            if p in self.names:
                if p not in self._trees:
                    self._trees[p] = ast.parse(self.zip.read(p).decode())
                return self._trees[p]
        raise AssertionError(f"module {dotted} is not in the wheel")

    def source(self, dotted: str) -> str:
        return self.zip.read(dotted.replace(".", "/") + ".py").decode()

    def find(self, target: str):
        """The def/class node at a dotted target (module path, then class and attribute names)."""
        parts = target.split(".")
        for i in range(len(parts) - 1, 0, -1):
            try:
                node = self.module(".".join(parts[:i]))
            except AssertionError:
                continue
            for name in parts[i:]:
                node = _child(node, name)
                if node is None:
                    return None
            return node
        return None


def _child(node, name):
    for n in getattr(node, "body", []):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name:
            return n
    return None


def _params(fn) -> list:
    a = fn.args
    return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]


def _imported_names(node) -> set:
    """Names bound by the module-level imports of `node` (what `from x import y` puts in its globals)."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {a.asname or a.name.split(".")[0] for a in n.names}
    return out


def _body_imports(fn) -> set:
    """(module, name) of every import inside a function body: names looked up at call time."""
    return {(n.module, a.name) for n in ast.walk(fn) if isinstance(n, ast.ImportFrom) for a in n.names}


@pytest.fixture(scope="module", params=sorted(SGLANG))
def sglang(request):
    return request.param, Wheel(_wheel("sglang", request.param))


def test_plugin_system(sglang):
    version, w = sglang
    src = w.zip.read("sglang/srt/plugins/__init__.py").decode()
    assert 'GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"' in src
    assert "SGLANG_PLUGINS" in src and "entry_points(group=group)" in src
    # a plugin's exception is only logged: register() must not rely on it reaching anyone
    assert 'logger.exception("Failed to execute general plugin' in src
    reg = w.find("sglang.srt.plugins.hook_registry.HookRegistry.register")
    assert reg is not None and _params(reg)[:4] == ["cls", "target", "hook", "hook_type"]
    hr = w.source("sglang.srt.plugins.hook_registry")
    assert 'AROUND = "around"' in hr and "return hook(original_fn, *args, **kwargs)" in hr
    # load_plugins() runs in every scheduler process (where the model and its layers live)
    assert "load_plugins()" in w.source("sglang.srt.managers.scheduler")


def test_the_op(sglang):
    version, w = sglang
    fn = w.find(plugin.OP)
    assert fn is not None, f"{plugin.OP} missing in {version}"
    assert set(plugin.OP_PARAMS) <= set(_params(fn)), _params(fn)
    # it returns (norm_out, residual_out) as fresh tensors: the plugin returns fresh ones too
    assert "residual_out = torch.empty_like(residual)" in ast.unparse(fn)


def test_the_caller_and_the_trap(sglang):
    version, w = sglang
    _, _, decline_safe, _ = SGLANG[version]
    caller = w.find(plugin.CALLER)
    assert caller is not None
    # imported inside the body: the attribute HookRegistry patches is what each call sees
    op_module, op_name = plugin.OP.rsplit(".", 1)
    assert (op_module, op_name) in _body_imports(caller)
    names = {a for _, a in _body_imports(caller)}
    assert any(n in names for n in plugin.DECLINE_SAFE_NAMES) == decline_safe
    text = ast.unparse(caller)
    if not decline_safe:
        # the trap: after a declined call the norm runs on the un-reduced input, no all-reduce between
        after = text.split("if fused_result[0] is not None:")[1].split("return norm_module.forward(x, residual")[0]
        assert "all_reduce(x)" not in after.split("if _use_aiter")[0]
    # both norms route here: RMSNorm with its weight, GemmaRMSNorm with the folded 1 + w
    assert w.find("sglang.srt.layers.layernorm.RMSNorm.forward_with_allreduce_fusion") is not None
    gemma = w.find("sglang.srt.layers.layernorm.GemmaRMSNorm.forward_with_allreduce_fusion")
    assert gemma is not None and "self.gemma_weight" in ast.unparse(gemma)


def test_the_gate_and_setup(sglang):
    version, w = sglang
    gate, setup, _, _ = SGLANG[version]
    for t in plugin.GATES:  # the plugin takes the first that exists: it must be this version's
        if w.find(t) is not None:
            assert t == gate, f"{version}: the plugin would pick {t}, expected {gate}"
            break
    g = w.find(gate)
    assert g is not None and len(_params(g)) == 1, f"{gate} in {version}"
    gate_mod = w.module(gate.rsplit(".", 1)[0])
    assert "is_dp_attention_enabled" in _imported_names(gate_mod) | {
        n.name for n in gate_mod.body if isinstance(n, ast.FunctionDef)}
    found = [t for t in plugin.SETUPS if w.find(t) is not None]
    assert found and found[0] == setup, f"{version}: {found}"
    assert _params(w.find(setup)) == ["self"]


def test_groups_and_sizes(sglang):
    version, w = sglang
    _, setup, _, how = SGLANG[version]
    fc = w.module("sglang.srt.layers.flashinfer_comm_fusion")
    if how == "resolve_fusion_group":
        fn = _child(fc, "resolve_fusion_group")
        assert fn is not None and "use_attn_tp_group" in _params(fn)
        assert "get_parallel" in _imported_names(fc)
        assert "tp_group" in w.source("sglang.srt.runtime_context") or "tp_group" in ast.unparse(
            w.module("sglang.srt.runtime_context"))
    else:
        assert _child(fc, "resolve_fusion_group") is None
        assert {"get_attn_tp_group", "get_moe_ep_group", "get_moe_tp_group", "get_tp_group"} <= _imported_names(fc)
    ps = w.source("sglang.srt.distributed.parallel_state")
    for attr in ("self.ranks = ranks", "self.rank_in_group = ", "self.world_size = ", "self.cpu_group = cpu_group"):
        assert attr in ps, attr
    assert w.find("sglang.srt.distributed.parallel_state.GroupCoordinator.all_reduce") is not None
    mr = w.source("sglang.srt.model_executor.model_runner")
    assert "self.server_args = " in mr and "self.dtype = " in mr and "self.model_config = " in mr
    if setup == plugin.SETUPS[0]:
        assert "self.model_runner = model_runner" in w.source("sglang.srt.model_executor.runner.base_runner")
    # the decode size: the engine's own list of captured batch sizes, called as the plugin calls it
    found = [t for t in plugin.CAPTURE_SIZES if w.find(t) is not None]
    assert found, f"{version}: no get_batch_sizes_to_capture"
    params = _params(w.find(found[0]))
    assert params[0] == "model_runner" and len(params) >= 2, params
    assert "return (capture_bs, compile_bs)" in ast.unparse(w.find(found[0]))


def test_plain_all_reduce_tags(sglang):
    """Where the engine's plain all-reduces run in FlashInfer's workspace the setup hook keeps it: read
    from GroupCoordinator._fi_workspace_hint (None unless tagged), stamped by
    _tag_groups_for_flashinfer_allreduce_only at group creation, before any runner's setup."""
    version, w = sglang
    ps = w.source("sglang.srt.distributed.parallel_state")
    tagged = "_fi_workspace_hint" in ps
    assert tagged == (tuple(int(v) for v in version.split(".")) >= (0, 5, 20)), version
    if tagged:
        assert "self._fi_workspace_hint: Optional[str] = None" in ps
        tag = w.find("sglang.srt.distributed.parallel_state._tag_groups_for_flashinfer_allreduce_only")
        assert tag is not None and "group._fi_workspace_hint = hint" in ast.unparse(tag)
        can = w.find("sglang.srt.distributed.parallel_state.GroupCoordinator._can_use_flashinfer_allreduce")
        assert can is not None and "if self._fi_workspace_hint is None:" in ast.unparse(can)


def test_entry_points_declared():
    tomllib = pytest.importorskip("tomllib", reason="Python < 3.11 has no tomllib to read pyproject.toml")

    meta = tomllib.loads((PACKAGE_DIR / "pyproject.toml").read_text())
    eps = meta["project"]["entry-points"]
    assert eps["sglang.srt.plugins"]["arfuse"] == "arfuse.integrations.sglang:register"
    assert eps["vllm.general_plugins"]["arfuse"] == "arfuse.integrations.vllm:register"
    # scikit-build-core ships the whole arfuse/ directory, the integrations subpackage with it
    assert "arfuse" in meta["tool"]["scikit-build"]["wheel"]["packages"]
    assert (PACKAGE_DIR / "arfuse" / "integrations" / "__init__.py").is_file()


@pytest.fixture(scope="module")
def vllm():
    return Wheel(_wheel("vllm", VLLM))


def test_vllm_plugin_system(vllm):
    src = vllm.zip.read("vllm/plugins/__init__.py").decode()
    assert 'DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"' in src and "VLLM_PLUGINS" in src
    # an exception in a general plugin is NOT caught by vLLM: register() must catch everything itself
    body = ast.unparse(vllm.find("vllm.plugins.load_general_plugins"))
    assert "func()" in body and "except" not in body


def test_vllm_pass_manager_builds_the_pass_by_name(vllm):
    from arfuse.integrations import vllm as vplug

    pm = vllm.module(vplug.PASS_MANAGER)
    assert vplug.PASS_NAME in _imported_names(pm)
    configure = vllm.find(vplug.PASS_MANAGER + ".PostGradPassManager.configure")
    calls = [n for n in ast.walk(configure) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert any(c.func.id == vplug.PASS_NAME for c in calls), "configure() no longer builds the pass by its global name"
    assert "self.pass_config.fuse_allreduce_rms" in ast.unparse(configure)


def test_vllm_fusion_pass_shape(vllm):
    from arfuse.integrations import vllm as vplug

    cls = vllm.find(vplug.PASS_MODULE + "." + vplug.PASS_NAME)
    assert cls is not None and [ast.unparse(b) for b in cls.bases] == ["VllmPatternMatcherPass"]
    for m in ("__init__", "is_applicable_for_range", "__call__"):
        assert _child(cls, m) is not None, m
    mod = vllm.module(vplug.PASS_MODULE)
    names = _imported_names(mod)
    assert {"tensor_model_parallel_all_reduce", "get_tp_group", "VllmPatternMatcherPass", "PatternMatcherPass"} <= names
    src = vllm.source(vplug.PASS_MODULE)
    for used in ("vllm.ir.ops.fused_add_rms_norm(", "vllm.ir.ops.rms_norm(", "pm.register_replacement(",
                 "MatcherQuantFP8(kFp8StaticTensorSym)", "enable_fake_mode"):
        assert used in src, used
    # the NVFP4 patterns arfuse replaces: the kernel op the pass names, swizzled scales only, and the
    # buffers vLLM's allocator makes (what the replacement op returns in their place)
    assert "STATIC_FP4_QUANT_OP = torch.ops._C.scaled_fp4_quant.out" in src
    assert src.count("is_sf_swizzled_layout=True") == 2
    alloc = ast.unparse(vllm.find("vllm._custom_ops.create_fp4_scale_tensor"))
    assert "(rounded_m, rounded_n // 4)" in alloc and "torch.int32" in alloc and "round_up(m, 128)" in alloc
    assert "(m, physical_n // 2)" in ast.unparse(vllm.find("vllm._custom_ops.create_fp4_output_tensors"))
    # SM120 has no size table: the pass disables itself there, which is why arfuse replaces it
    assert "flashinfer_max_size(" in ast.unparse(_child(cls, "__init__"))
    vpass = vllm.source("vllm.compilation.passes.vllm_inductor_pass")
    assert "class VllmPatternMatcherPass" in vpass
    assert "fuse_allreduce_rms" in vllm.source("vllm.config.compilation")
