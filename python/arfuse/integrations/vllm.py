"""arfuse as vLLM's all-reduce + RMSNorm fusion pass, on any GPU.

Registered as the `arfuse` entry point of the `vllm.general_plugins` group (run in every vLLM
process; VLLM_PLUGINS may whitelist it). It does nothing unless ARFUSE_VLLM=1. Then it replaces the
name AllReduceFusionPass in vllm.compilation.passes.pass_manager, which PostGradPassManager.configure
instantiates when pass_config.fuse_allreduce_rms is on (vLLM turns it on by default only on SM90 /
SM100 with FlashInfer: elsewhere pass `-cc.pass_config.fuse_allreduce_rms=True`).

The replacement pass, built on every rank at the same point of compilation, makes one arfuse
communicator over the TP group's CPU (gloo) group, the ranks agree, and it registers patterns that
match what vLLM's own pass matches:
    all_reduce(x) -> fused_add_rms_norm(., residual, w)     (the two outputs, or the norm alone)
    all_reduce(x) -> rms_norm(., w)                          (the first layer: residual_out = the sum)
    the same two followed by static FP8 quantisation          (arfuseAllReduceEpilogue, quant "fp8")
    the same two followed by scaled_fp4_quant (NVFP4, swizzled block scales)
                                                              (arfuseAllReduceEpilogue, quant "nvfp4",
                                                               scale layout swizzled 128x4)
    the same two with Gemma's weight.float() + 1.0            (arfuseAllReduceEpilogue, weight_plus_one)
and replaces each by one arfuse_vllm op (_vllm_ops.py), only in compile ranges within the decode
window (prefill graphs stay as vLLM builds them). The op carries the window and the widest hidden
size as constants, so a graph loaded from vLLM's cache on a warm start (the pass never built) makes
its state at its first call; when that fails, one WARN and vLLM's own all-reduce and norm. configure()
puts what changes the graphs (the plugin on, arfuse's version, the window) in
VllmConfig.additional_config["arfuse"], which vLLM hashes into its compile-cache keys, and the window
into compile_ranges_endpoints. When arfuse cannot serve the group the original pass is built instead
and the engine runs as it was.

NVFP4: vLLM's torch.ops._C.scaled_fp4_quant.out(input, g, is_sf_swizzled_layout=True) writes E2M1
bytes uint8 [tokens, hidden / 2] (element 2i in the low nibble) and E4M3 block scales as int32
[roundUp(tokens, 128), roundUp(hidden / 16, 4) / 4] in the 128x4 tiles, padding zero; its g is
arfuse's global scale (sf = e4m3(amax * g / 6), dequantised e2m1 * sf / g). arfuse's epilogue writes
the same layout (its uint8 scales viewed as int32). Buffers of another shape (scaled_fp4_quant's
padded_n) keep vLLM's quant (the all-reduce + norm before it is still fused). Values: arfuse's
arithmetic is correctly rounded fp32 (docs/quantization.md); vLLM's CUDA kernel uses rcp.approx.ftz
and multiplies g * (amax * (1/6)), so a block scale or code can differ by one rounding step in rare
blocks.

Numerics: vLLM's reference normalises the fp32 sum before rounding the residual; arfuse rounds the
residual to the model dtype first and normalises that rounded residual (what the next layer reads),
so the norm can differ by one rounding of the residual (docs/integrations.md).
"""
import importlib
from typing import Any, Optional

from . import _glue

ENV = "ARFUSE_VLLM"
MAX_TOKENS_ENV = "ARFUSE_VLLM_MAX_TOKENS"
DEFAULT_MAX_TOKENS = 512
PASS_MANAGER = "vllm.compilation.passes.pass_manager"
PASS_MODULE = "vllm.compilation.passes.fusion.allreduce_rms_fusion"
PASS_NAME = "AllReduceFusionPass"
EPSILONS = (1e-5, 1e-6)

ADDITIONAL_KEY = "arfuse"  # VllmConfig.additional_config[ADDITIONAL_KEY]: what arfuse puts in the compile-cache key


def fusion() -> Optional[_glue.Fusion]:
    """This process's arfuse state for vLLM (None before the pass or the first op call made it)."""
    return _ops().state()


def _ops():
    from . import _vllm_ops

    return _vllm_ops


# ---- the decode window and the compile-cache key ---------------------------------------------------------
def _decode_tokens(config: Any) -> int:
    explicit = _glue.env_positive_int(MAX_TOKENS_ENV)
    if explicit:
        return explicit
    cc = config.compilation_config
    size = getattr(cc, "max_cudagraph_capture_size", None)
    if not size and getattr(cc, "cudagraph_capture_sizes", None):
        size = max(cc.cudagraph_capture_sizes)
    size = size or DEFAULT_MAX_TOKENS
    batched = getattr(config.scheduler_config, "max_num_batched_tokens", None)
    return int(min(size, batched)) if batched else int(size)


def cache_factors(max_tokens: int) -> dict:
    """What changes the graphs the pass compiles, beyond vLLM's own configuration: that arfuse
    rewrites them at all, its version (the ops' schema and the patterns), and the decode window (the
    compile range the patterns apply to, a constant in the ops). Hashed by vLLM as part of the config."""
    from arfuse import __version__

    return {"vllm_plugin": True, "version": __version__, "max_tokens": int(max_tokens)}


def configure(config: Any) -> None:
    """Runs inside VllmConfig.__post_init__ (after the platform's own check_and_update_config, before
    vLLM computes its compile ranges): when the all-reduce fusion pass is on at TP > 1, writes
    cache_factors into config.additional_config["arfuse"], which vLLM hashes into both compile caches
    (the AOT artifact's key and the Inductor cache folder: VllmConfig.compute_hash in 0.33,
    compile_factors in 0.34), and adds the decode window to compile_ranges_endpoints, so that the
    graph of the range [1, window] is compiled apart from prefill-sized ones. Never raises."""
    try:
        pc = config.compilation_config.pass_config
        tp = getattr(config.parallel_config, "tensor_parallel_size", 1)
        if not getattr(pc, "fuse_allreduce_rms", False) or tp <= 1:
            return
        try:
            window = _decode_tokens(config)
        except ValueError as e:
            _glue.warn(f"vllm {_ops().version()}: arfuse not used, the engine keeps its own pass: {e}")
            return
        extra = config.additional_config
        if not isinstance(extra, dict):
            _glue.warn(f"vllm {_ops().version()}: arfuse not used, the engine keeps its own pass: "
                       f"additional_config is a {type(extra).__name__}, not a dict, so arfuse cannot enter "
                       f"vLLM's compile-cache key")
            return
        extra[ADDITIONAL_KEY] = cache_factors(window)
        cc = config.compilation_config
        cc.compile_ranges_endpoints = sorted(set(list(cc.compile_ranges_endpoints or []) + [window]))
    except Exception as e:  # noqa: BLE001 - a plugin must never stop the engine
        _glue.warn(f"vllm {_ops().version()}: arfuse could not configure vLLM, the engine keeps its own pass: "
                   f"{type(e).__name__}: {e}")


def _keyed_window(config: Any) -> Optional[int]:
    """The decode window configure() wrote into this config, None when it is not there (then arfuse
    is not in vLLM's compile-cache key and must not rewrite)."""
    extra = getattr(config, "additional_config", None)
    entry = extra.get(ADDITIONAL_KEY) if isinstance(extra, dict) else None
    try:
        if entry == cache_factors(entry["max_tokens"]):
            return int(entry["max_tokens"])
    except Exception:  # noqa: BLE001
        pass
    return None


def _install_config_hook() -> None:
    """configure() after the current platform's check_and_update_config, the hook vLLM calls from
    VllmConfig.__post_init__ for a platform to adjust the configuration (once per process)."""
    from vllm.platforms import current_platform

    cls = type(current_platform)
    original = cls.__dict__.get("check_and_update_config")
    if getattr(original, "__func__", None) is not None and getattr(original.__func__, "arfuse_original", None):
        return
    bound = cls.check_and_update_config  # the classmethod bound to cls (its own or inherited)

    def check_and_update_config(klass, vllm_config):
        bound(vllm_config)
        configure(vllm_config)

    check_and_update_config.arfuse_original = bound
    cls.check_and_update_config = classmethod(check_and_update_config)


def _setup(config: Any, hidden: int, dtype: Any, max_tokens: int) -> bool:
    """One Fusion per process (a draft model's pass reuses the target's): collective on first use."""
    f = _ops().state()
    if f is None:
        f = _ops().make_state(max_tokens, hidden, dtype)
    return f.active


def _patterns(eps: float, quant: Any, all_reduce: Any, ops: Any, fp4: Any, mt: int, mh: int) -> list:
    """(pattern, replacement, kind of example inputs) for one epsilon, as closures: the pattern matcher takes
    every parameter of a pattern for a graph input, so none may carry a default. fp4: vLLM's
    torch.ops._C.scaled_fp4_quant.out (None: this vLLM has no NVFP4 kernel, no NVFP4 pattern). mt, mh:
    the decode window and the widest hidden size, written into each replacement op as constants (its
    state is made from them at its first call when the pass that compiled it never ran)."""
    from torch._higher_order_ops.auto_functionalize import auto_functionalized

    import vllm.ir.ops as ir

    def add(residual, x, weight):
        return ir.fused_add_rms_norm(all_reduce(x), residual, weight, eps)

    def add_r(residual, x, weight):
        norm, res = ops.all_reduce_add_rms_norm(x, residual, weight, eps, mt, mh)
        return norm, res

    def add_norm_only(residual, x, weight):
        return add(residual, x, weight)[0]

    def add_norm_only_r(residual, x, weight):
        return add_r(residual, x, weight)[0]

    def first(x, weight):
        s = all_reduce(x)
        return ir.rms_norm(s, weight, eps), s

    def first_r(x, weight):
        norm, res = ops.all_reduce_add_rms_norm(x, None, weight, eps, mt, mh)
        return norm, res

    def add_fp8(residual, x, weight, scale):
        norm, res = ir.fused_add_rms_norm(all_reduce(x), residual, weight, eps)
        return quant(norm, scale)[0], res

    def add_fp8_r(residual, x, weight, scale):
        q, res = ops.all_reduce_add_rms_norm_fp8(x, residual, weight, eps, scale, mt, mh)
        return q, res

    def first_fp8(x, weight, scale):
        s = all_reduce(x)
        return quant(ir.rms_norm(s, weight, eps), scale)[0], s

    def first_fp8_r(x, weight, scale):
        q, res = ops.all_reduce_add_rms_norm_fp8(x, None, weight, eps, scale, mt, mh)
        return q, res

    # NVFP4 as vLLM's graphs hold scaled_fp4_quant (functionalised .out, swizzled scales): the two
    # buffers it writes are pattern inputs; the replacement leaves them unused (the op returns its own)
    def add_nvfp4(residual, x, weight, global_scale, quant_result, output_scale):
        norm, res = ir.fused_add_rms_norm(all_reduce(x), residual, weight, eps)
        q = auto_functionalized(fp4, input=norm, input_scale=global_scale, is_sf_swizzled_layout=True,
                                output=quant_result, output_scale=output_scale)
        return q[1], res, q[2]

    def add_nvfp4_r(residual, x, weight, global_scale, quant_result, output_scale):
        q, res, sf = ops.all_reduce_add_rms_norm_nvfp4(x, residual, weight, eps, global_scale, mt, mh)
        return q, res, sf

    def first_nvfp4(x, weight, global_scale, quant_result, output_scale):
        s = all_reduce(x)
        q = auto_functionalized(fp4, input=ir.rms_norm(s, weight, eps), input_scale=global_scale,
                                is_sf_swizzled_layout=True, output=quant_result, output_scale=output_scale)
        return q[1], s, q[2]

    def first_nvfp4_r(x, weight, global_scale, quant_result, output_scale):
        q, res, sf = ops.all_reduce_add_rms_norm_nvfp4(x, None, weight, eps, global_scale, mt, mh)
        return q, res, sf

    def gemma_add(residual, x, weight):
        return ir.fused_add_rms_norm(all_reduce(x), residual, weight.float() + 1.0, eps)

    def gemma_add_r(residual, x, weight):
        norm, res = ops.all_reduce_add_rms_norm_plus_one(x, residual, weight, eps, mt, mh)
        return norm, res

    def gemma_add_norm_only(residual, x, weight):
        return gemma_add(residual, x, weight)[0]

    def gemma_add_norm_only_r(residual, x, weight):
        return gemma_add_r(residual, x, weight)[0]

    def gemma_first(x, weight):
        s = all_reduce(x)
        return ir.rms_norm(s, weight.float() + 1.0, eps), s

    def gemma_first_r(x, weight):
        norm, res = ops.all_reduce_add_rms_norm_plus_one(x, None, weight, eps, mt, mh)
        return norm, res

    # the quantised ones first: their un-quantised prefix would otherwise match and leave the quant;
    # the plain ones' dtype checks keep them off Gemma's fp32 (1 + w)
    nvfp4 = [(add_nvfp4, add_nvfp4_r, "add_nvfp4"), (first_nvfp4, first_nvfp4_r, "first_nvfp4")] if fp4 else []
    return nvfp4 + [(add_fp8, add_fp8_r, "add_fp8"), (first_fp8, first_fp8_r, "first_fp8"),
            (gemma_add, gemma_add_r, "gemma_add"), (gemma_add_norm_only, gemma_add_norm_only_r, "gemma_add"),
            (gemma_first, gemma_first_r, "gemma_first"), (add, add_r, "add"),
            (add_norm_only, add_norm_only_r, "add"), (first, first_r, "first")]


def _nvfp4_buffers_match(match: Any, fp4: Any) -> bool:
    """The NVFP4 replacement returns the tensors vLLM's scaled_fp4_quant allocates for a [tokens, hidden]
    input (create_fp4_output_tensors, swizzled): E2M1 bytes uint8 [tokens, hidden / 2] and the scales
    int32 [roundUp(tokens, 128), roundUp(hidden / 16, 4) / 4]. Buffers of any other shape (padded_n,
    a linear layout) leave the match to vLLM: arfuse's output would not fit them."""
    import torch
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    try:
        for node in match.nodes:
            if not (node.args and node.args[0] is fp4 and node.kwargs.get("is_sf_swizzled_layout") is True):
                continue
            inp, gs = node.kwargs["input"].meta["val"], node.kwargs["input_scale"].meta["val"]
            out, sf = node.kwargs["output"].meta["val"], node.kwargs["output_scale"].meta["val"]
            hidden = inp.shape[-1]
            if not isinstance(hidden, int) or hidden % 16 or inp.dtype not in (torch.bfloat16, torch.float16):
                return False
            if gs.dtype != torch.float32 or not statically_known_true(gs.numel() == 1):
                return False
            tokens = inp.numel() // hidden
            return (out.dtype == torch.uint8 and out.dim() == 2 and out.shape[-1] == hidden // 2
                    and statically_known_true(out.shape[0] == tokens) and sf.dtype == torch.int32
                    and sf.dim() == 2 and sf.shape[-1] == (hidden // 16 + 3) // 4
                    and statically_known_true(sf.shape[0] == (tokens + 127) // 128 * 128))
    except Exception:  # noqa: BLE001 - a graph we cannot read is left to vLLM
        return False
    return False


def register_patterns(patterns: Any, dtype: Any, device: Any, max_tokens: Optional[int] = None,
                      max_hidden: Optional[int] = None) -> None:
    """Registers arfuse's replacements in a PatternMatcherPass for a model of `dtype` on `device`
    (call under vLLM's enable_fake_mode, as the pass does). max_tokens, max_hidden: the constants the
    replacement ops carry (None: those of this process's arfuse state)."""
    import torch
    import torch._inductor.pattern_matcher as pm

    from vllm.distributed import tensor_model_parallel_all_reduce

    src = importlib.import_module(PASS_MODULE)
    _ops().register()
    if max_tokens is None or max_hidden is None:
        b = next(iter(fusion().bound.values()))
        max_tokens, max_hidden = b.max_tokens, b.hidden
    ops = torch.ops.arfuse_vllm
    norm_check = getattr(src, "_norm_input_weight_dtype_match", None)
    rms_check = getattr(src, "_rms_input_weight_dtype_match", None)

    def empty(*shape):
        return torch.empty(*shape, dtype=dtype, device=device)

    fp4 = getattr(src, "STATIC_FP4_QUANT_OP", None)  # defined there when vLLM's kernels have scaled_fp4_quant

    def nvfp4_check(dtype_check):
        return lambda m: (dtype_check is None or dtype_check(m)) and _nvfp4_buffers_match(m, fp4)

    for eps in EPSILONS:
        quant = src.MatcherQuantFP8(src.kFp8StaticTensorSym)
        rows, w, scale = [empty(5, 16), empty(5, 16), empty(16)], [empty(16)], [quant.inputs()[1]]
        # global scale [1, 1] fp32, E2M1 bytes [5, 8], swizzled scales int32 [128, 1] (one 16-element block)
        fp4_io = [torch.empty(1, 1, dtype=torch.float32, device=device),
                  torch.empty(5, 8, dtype=torch.uint8, device=device),
                  torch.empty(128, 1, dtype=torch.int32, device=device)]
        for pat, rep, kind in _patterns(eps, quant, tensor_model_parallel_all_reduce, ops, fp4, int(max_tokens),
                                        int(max_hidden)):
            example = {"add": rows, "first": rows[1:2] + w, "add_fp8": rows + scale, "first_fp8": rows[1:2] + w + scale,
                       "add_nvfp4": rows + fp4_io, "first_nvfp4": rows[1:2] + w + fp4_io,
                       "gemma_add": rows, "gemma_first": rows[1:2] + w}[kind]
            check = None if kind.startswith("gemma") else norm_check if kind.startswith("add") else rms_check
            if kind.endswith("nvfp4"):
                check = nvfp4_check(check)
            extra = {"extra_check": check} if check else {}  # None is not accepted: the default accepts all
            pm.register_replacement(pat, rep, example, pm.fwd_only, patterns, **extra)
        # as vLLM's own pass does: let the next epsilon register the same shapes again
        torch._inductor.pattern_matcher._seen_patterns.clear()


def make_pass(original: Any) -> Any:
    """The pass class that replaces `original` (vLLM's AllReduceFusionPass)."""
    from torch._inductor.pattern_matcher import PatternMatcherPass

    from vllm.distributed.parallel_state import get_tensor_model_parallel_world_size

    src = importlib.import_module(PASS_MODULE)
    VllmPatternMatcherPass = src.VllmPatternMatcherPass
    InductorPass = importlib.import_module("vllm.compilation.passes.inductor_pass").InductorPass
    enable_fake_mode = src.enable_fake_mode
    width = getattr(src, "_fused_ar_workspace_hidden_dim", lambda c: c.model_config.get_hidden_size())
    _ops().register()

    class ArfuseAllReduceFusionPass(VllmPatternMatcherPass):
        """vLLM's all-reduce + RMSNorm (+ static FP8 / NVFP4) patterns replaced by arfuse (any GPU), in
        the compile ranges within the decode window only."""

        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.disabled = True
            self.inner = None
            self.max_tokens = 0
            if get_tensor_model_parallel_world_size() <= 1 or config.model_config is None:
                return
            active = False
            window = _keyed_window(config)
            try:
                if window is None:
                    # configure() did not run for this config: arfuse is not in vLLM's compile-cache
                    # key, so a graph rewritten now could be loaded by a launch without the plugin
                    _glue.warn(f"vllm {_ops().version()}: arfuse not used, the engine keeps its own pass: the "
                               f"configuration lacks additional_config['{ADDITIONAL_KEY}'] (arfuse's part of the "
                               f"compile-cache key, written when the plugin is loaded before the VllmConfig is made)")
                else:
                    active = _setup(config, int(width(config)), self.model_dtype, window)
            except Exception as e:  # noqa: BLE001 - a plugin must never stop the engine
                _glue.warn(f"vllm {_ops().version()}: arfuse setup failed, the engine keeps its own pass: "
                           f"{type(e).__name__}: {e}")
                active = False
            if not active:
                self.inner = original(config)  # the engine exactly as it was
                return
            self.max_tokens, self.max_hidden = window, int(width(config))
            self.patterns = PatternMatcherPass(pass_name="arfuse_all_reduce_fusion_pass")
            self.register_patterns()
            self.dump_patterns(config, self.patterns)

        @enable_fake_mode
        def register_patterns(self) -> None:
            register_patterns(self.patterns, self.model_dtype, self.device, self.max_tokens, self.max_hidden)
            self.disabled = False

        def is_applicable_for_range(self, compile_range: Any) -> bool:
            if self.inner is not None:
                return self.inner.is_applicable_for_range(compile_range)
            # as vLLM bounds its own fusion: prefill-sized graphs stay as vLLM builds them (its
            # norm + quant fusion then still finds the norms)
            return not self.disabled and int(compile_range.end) <= self.max_tokens

        def __call__(self, graph: Any) -> None:
            if self.inner is not None:
                return self.inner(graph)
            if self.disabled:
                return None
            self.matched_count = self.patterns.apply(graph)
            return None

        def uuid(self) -> Any:
            if self.inner is not None:
                return self.inner.uuid()
            return InductorPass.hash_dict({"source": InductorPass.hash_source(_source()),
                                           "arfuse": cache_factors(self.max_tokens), "max_hidden": self.max_hidden})

    ArfuseAllReduceFusionPass.original = original
    return ArfuseAllReduceFusionPass


def _source() -> str:
    """The text of the plugin's modules (the patterns and the ops): part of the pass's uuid."""
    from pathlib import Path

    from . import _vllm_ops

    return "".join(Path(m.__file__).read_text() for m in (_vllm_ops, importlib.import_module(__name__)))


def register() -> None:
    """The entry point: installs the pass and the configuration hook when ARFUSE_VLLM=1; never raises
    (vLLM does not catch a general plugin's exception)."""
    if not _glue.env_flag(ENV):
        return
    try:
        pmgr = importlib.import_module(PASS_MANAGER)
        original = getattr(pmgr, PASS_NAME, None)
        if original is None:
            _glue.warn(f"vllm {_ops().version()}: {PASS_MANAGER} has no {PASS_NAME} (not a CUDA platform, or an "
                       f"unknown vLLM): nothing patched, the engine runs as it is")
            return
        if getattr(original, "original", None) is not None:
            return  # already installed in this process
        _install_config_hook()
        setattr(pmgr, PASS_NAME, make_pass(original))
    except Exception as e:  # noqa: BLE001
        _glue.warn(f"vllm {_ops().version()}: arfuse pass not installed, the engine runs as it is: "
                   f"{type(e).__name__}: {e}")
