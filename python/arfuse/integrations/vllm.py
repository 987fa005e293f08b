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
and replaces each by one arfuse_vllm op. That op decides per call from the token count (the same on
every rank): arfuse's fused kernel, or vLLM's own all-reduce then arfuse's add+RMSNorm (then, for the
quantised ones, the quantisation in torch: arfuse._torch_quant for NVFP4, the same bytes as arfuse's
kernel). When arfuse cannot serve the group the original pass is built instead and the engine runs
as it was.

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

_fusion: Optional[_glue.Fusion] = None
_ops_registered = False


def fusion() -> Optional[_glue.Fusion]:
    return _fusion


# ---- the ops the patterns are replaced by ----------------------------------------------------------------
def _register_ops() -> None:
    global _ops_registered
    if _ops_registered:
        return
    import torch

    def serve(x, residual, weight, eps):
        f = _fusion
        if f is None or not f.active:
            raise RuntimeError("arfuse_vllm op called without an active arfuse communicator (the pass that "
                               "inserted it should not have been applied)")
        if residual is None:
            residual = torch.zeros_like(x)  # first layer: residual_out = round(0 + sum) = round(sum)
        out = f.serve("tp", x, residual, weight, eps)
        assert out is not None and out is not _glue.NOT_OURS  # vLLM never declines: decline_safe=False
        return out

    @torch.library.custom_op("arfuse_vllm::all_reduce_add_rms_norm", mutates_args=())
    def all_reduce_add_rms_norm(x: torch.Tensor, residual: Optional[torch.Tensor], weight: torch.Tensor,
                                eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        norm, res = serve(x, residual, weight, eps)
        return norm, res

    @all_reduce_add_rms_norm.register_fake
    def _(x, residual, weight, eps):
        return torch.empty_like(x), torch.empty_like(x)

    def direct(x, residual, weight):
        """The communicator when arfuse's epilogue serves this call (same on every rank), else None."""
        f = _fusion
        b = f.by_name.get("tp") if f is not None else None
        hidden = int(x.shape[-1])
        tokens = int(x.numel() // hidden)
        # above the decode size the library is not asked (as Fusion.serve: it would log its refusal)
        if b is None or not 0 < tokens <= b.max_tokens or not _glue._servable(x, residual, weight):
            return None
        return b.comm if _glue.get_backend().choose(b.comm, tokens, hidden, x.dtype).path == "arfuse" else None

    @torch.library.custom_op("arfuse_vllm::all_reduce_add_rms_norm_fp8", mutates_args=())
    def all_reduce_add_rms_norm_fp8(x: torch.Tensor, residual: Optional[torch.Tensor], weight: torch.Tensor,
                                    eps: float, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        res_in = residual if residual is not None else torch.zeros_like(x)
        comm = direct(x, res_in, weight)
        if comm is not None:
            _glue.count("vllm", "tp", "arfuse")
            _, res, q = _glue.get_backend().epilogue(comm, x, res_in, weight, eps, scale=scale)
            return q, res
        norm, res = serve(x, res_in, weight, eps)  # vLLM's all-reduce + arfuse's add+RMSNorm, then FP8
        q = (norm.float() * (1.0 / scale.float())).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return q, res

    @all_reduce_add_rms_norm_fp8.register_fake
    def _(x, residual, weight, eps, scale):
        return torch.empty_like(x, dtype=torch.float8_e4m3fn), torch.empty_like(x)

    @torch.library.custom_op("arfuse_vllm::all_reduce_add_rms_norm_plus_one", mutates_args=())
    def all_reduce_add_rms_norm_plus_one(x: torch.Tensor, residual: Optional[torch.Tensor], weight: torch.Tensor,
                                         eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        # Gemma: the norm's weight is 1 + w, folded by arfuse's epilogue (weight_plus_one) in fp32
        res_in = residual if residual is not None else torch.zeros_like(x)
        comm = direct(x, res_in, weight)
        if comm is not None:
            _glue.count("vllm", "tp", "arfuse")
            norm, res, _ = _glue.get_backend().epilogue(comm, x, res_in, weight, eps, weight_plus_one=True)
            return norm, res
        norm, res = serve(x, res_in, weight.float() + 1.0, eps)
        return norm, res

    @all_reduce_add_rms_norm_plus_one.register_fake
    def _(x, residual, weight, eps):
        return torch.empty_like(x), torch.empty_like(x)

    def nvfp4_shapes(x):
        """(tokens, E2M1 bytes per row, int32 columns of the swizzled scales, their padded rows): the
        tensors vLLM's scaled_fp4_quant allocates (create_fp4_output_tensors) for a [..., hidden] input."""
        hidden = x.shape[-1]
        tokens = x.numel() // hidden
        return tokens, hidden // 2, (hidden // 16 + 3) // 4, (tokens + 127) // 128 * 128

    @torch.library.custom_op("arfuse_vllm::all_reduce_add_rms_norm_nvfp4", mutates_args=())
    def all_reduce_add_rms_norm_nvfp4(x: torch.Tensor, residual: Optional[torch.Tensor], weight: torch.Tensor,
                                      eps: float, global_scale: torch.Tensor
                                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # (E2M1 bytes [tokens, hidden / 2], residual_out, E4M3 block scales in the swizzled 128x4 layout
        # as vLLM holds them: int32 [roundUp(tokens, 128), roundUp(hidden / 16, 4) / 4], 4 scales a word)
        from arfuse import _torch_quant

        res_in = residual if residual is not None else torch.zeros_like(x)
        tokens, half, words, rows = nvfp4_shapes(x)
        comm = direct(x, res_in, weight)
        if comm is not None:
            _glue.count("vllm", "tp", "arfuse")
            res, q, sf = _glue.get_backend().epilogue_nvfp4(comm, x, res_in, weight, eps, global_scale)
            return q.reshape(tokens, half), res, sf.reshape(rows, words * 4).view(torch.int32)
        norm, res = serve(x, res_in, weight, eps)  # vLLM's all-reduce + arfuse's add+RMSNorm, then NVFP4
        q, sf = _torch_quant.nvfp4(norm.float().reshape(tokens, 2 * half), global_scale.float(), 1)
        return q, res, sf.reshape(rows, words * 4).view(torch.int32)

    @all_reduce_add_rms_norm_nvfp4.register_fake
    def _(x, residual, weight, eps, global_scale):
        tokens, half, words, rows = nvfp4_shapes(x)
        return (x.new_empty((tokens, half), dtype=torch.uint8), torch.empty_like(x),
                x.new_empty((rows, words), dtype=torch.int32))

    _ops_registered = True


# ---- the pass ---------------------------------------------------------------------------------------------
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


def _setup(config: Any, hidden: int, dtype: Any) -> bool:
    """One Fusion per process (a draft model's pass reuses the target's): collective on first use."""
    global _fusion
    if _fusion is not None:
        return _fusion.active
    from vllm.distributed import get_tp_group

    tp = get_tp_group()
    f = _glue.Fusion("vllm", decline_safe=False)
    _fusion = f
    group = _glue.Group("tp", tuple(tp.ranks), int(tp.rank_in_group), int(tp.world_size), tp.cpu_group, tp.all_reduce)
    try:
        max_tokens = _decode_tokens(config)
    except ValueError as e:
        if tp.rank_in_group == 0:
            _glue.warn(f"vllm: arfuse not used, the engine keeps its own pass: {e}")
        return False
    return f.setup([group], tp.cpu_group, max_tokens, hidden, dtype)


def _patterns(eps: float, quant: Any, all_reduce: Any, ops: Any, fp4: Any = None) -> list:
    """(pattern, replacement, kind of example inputs) for one epsilon, as closures: the pattern matcher takes
    every parameter of a pattern for a graph input, so none may carry a default. fp4: vLLM's
    torch.ops._C.scaled_fp4_quant.out (None: this vLLM has no NVFP4 kernel, no NVFP4 pattern)."""
    from torch._higher_order_ops.auto_functionalize import auto_functionalized

    import vllm.ir.ops as ir

    def add(residual, x, weight):
        return ir.fused_add_rms_norm(all_reduce(x), residual, weight, eps)

    def add_r(residual, x, weight):
        norm, res = ops.all_reduce_add_rms_norm(x, residual, weight, eps)
        return norm, res

    def add_norm_only(residual, x, weight):
        return add(residual, x, weight)[0]

    def add_norm_only_r(residual, x, weight):
        return add_r(residual, x, weight)[0]

    def first(x, weight):
        s = all_reduce(x)
        return ir.rms_norm(s, weight, eps), s

    def first_r(x, weight):
        norm, res = ops.all_reduce_add_rms_norm(x, None, weight, eps)
        return norm, res

    def add_fp8(residual, x, weight, scale):
        norm, res = ir.fused_add_rms_norm(all_reduce(x), residual, weight, eps)
        return quant(norm, scale)[0], res

    def add_fp8_r(residual, x, weight, scale):
        q, res = ops.all_reduce_add_rms_norm_fp8(x, residual, weight, eps, scale)
        return q, res

    def first_fp8(x, weight, scale):
        s = all_reduce(x)
        return quant(ir.rms_norm(s, weight, eps), scale)[0], s

    def first_fp8_r(x, weight, scale):
        q, res = ops.all_reduce_add_rms_norm_fp8(x, None, weight, eps, scale)
        return q, res

    # NVFP4 as vLLM's graphs hold scaled_fp4_quant (functionalised .out, swizzled scales): the two
    # buffers it writes are pattern inputs; the replacement leaves them unused (the op returns its own)
    def add_nvfp4(residual, x, weight, global_scale, quant_result, output_scale):
        norm, res = ir.fused_add_rms_norm(all_reduce(x), residual, weight, eps)
        q = auto_functionalized(fp4, input=norm, input_scale=global_scale, is_sf_swizzled_layout=True,
                                output=quant_result, output_scale=output_scale)
        return q[1], res, q[2]

    def add_nvfp4_r(residual, x, weight, global_scale, quant_result, output_scale):
        q, res, sf = ops.all_reduce_add_rms_norm_nvfp4(x, residual, weight, eps, global_scale)
        return q, res, sf

    def first_nvfp4(x, weight, global_scale, quant_result, output_scale):
        s = all_reduce(x)
        q = auto_functionalized(fp4, input=ir.rms_norm(s, weight, eps), input_scale=global_scale,
                                is_sf_swizzled_layout=True, output=quant_result, output_scale=output_scale)
        return q[1], s, q[2]

    def first_nvfp4_r(x, weight, global_scale, quant_result, output_scale):
        q, res, sf = ops.all_reduce_add_rms_norm_nvfp4(x, None, weight, eps, global_scale)
        return q, res, sf

    def gemma_add(residual, x, weight):
        return ir.fused_add_rms_norm(all_reduce(x), residual, weight.float() + 1.0, eps)

    def gemma_add_r(residual, x, weight):
        norm, res = ops.all_reduce_add_rms_norm_plus_one(x, residual, weight, eps)
        return norm, res

    def gemma_add_norm_only(residual, x, weight):
        return gemma_add(residual, x, weight)[0]

    def gemma_add_norm_only_r(residual, x, weight):
        return gemma_add_r(residual, x, weight)[0]

    def gemma_first(x, weight):
        s = all_reduce(x)
        return ir.rms_norm(s, weight.float() + 1.0, eps), s

    def gemma_first_r(x, weight):
        norm, res = ops.all_reduce_add_rms_norm_plus_one(x, None, weight, eps)
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


def register_patterns(patterns: Any, dtype: Any, device: Any) -> None:
    """Registers arfuse's replacements in a PatternMatcherPass for a model of `dtype` on `device`
    (call under vLLM's enable_fake_mode, as the pass does)."""
    import torch
    import torch._inductor.pattern_matcher as pm

    from vllm.distributed import tensor_model_parallel_all_reduce

    src = importlib.import_module(PASS_MODULE)
    _register_ops()
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
        for pat, rep, kind in _patterns(eps, quant, tensor_model_parallel_all_reduce, ops, fp4):
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
    enable_fake_mode = src.enable_fake_mode
    width = getattr(src, "_fused_ar_workspace_hidden_dim", lambda c: c.model_config.get_hidden_size())
    _register_ops()

    class ArfuseAllReduceFusionPass(VllmPatternMatcherPass):
        """vLLM's all-reduce + RMSNorm (+ static FP8 / NVFP4) patterns replaced by arfuse (any GPU)."""

        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.disabled = True
            self.inner = None
            if get_tensor_model_parallel_world_size() <= 1 or config.model_config is None:
                return
            try:
                active = _setup(config, int(width(config)), self.model_dtype)
            except Exception as e:  # noqa: BLE001 - a plugin must never stop the engine
                _glue.warn(f"vllm: arfuse setup failed, the engine keeps its own pass: {type(e).__name__}: {e}")
                active = False
            if not active:
                self.inner = original(config)  # the engine exactly as it was
                return
            self.patterns = PatternMatcherPass(pass_name="arfuse_all_reduce_fusion_pass")
            self.register_patterns()
            self.dump_patterns(config, self.patterns)

        @enable_fake_mode
        def register_patterns(self) -> None:
            register_patterns(self.patterns, self.model_dtype, self.device)
            self.disabled = False

        def is_applicable_for_range(self, compile_range: Any) -> bool:
            if self.inner is not None:
                return self.inner.is_applicable_for_range(compile_range)
            return not self.disabled  # every range: the op picks arfuse or vLLM's all-reduce per call

        def __call__(self, graph: Any) -> None:
            if self.inner is not None:
                return self.inner(graph)
            if self.disabled:
                return None
            self.matched_count = self.patterns.apply(graph)
            return None

        def uuid(self) -> Any:
            return self.inner.uuid() if self.inner is not None else super().uuid()

    ArfuseAllReduceFusionPass.original = original
    return ArfuseAllReduceFusionPass


def register() -> None:
    """The entry point: installs the pass when ARFUSE_VLLM=1; never raises (vLLM does not catch a
    general plugin's exception)."""
    if not _glue.env_flag(ENV):
        return
    try:
        pmgr = importlib.import_module(PASS_MANAGER)
        original = getattr(pmgr, PASS_NAME, None)
        if original is None:
            _glue.warn(f"vllm: {PASS_MANAGER} has no {PASS_NAME} (not a CUDA platform, or an unknown vLLM): "
                       f"nothing patched, the engine runs as it is")
            return
        if getattr(original, "original", None) is not None:
            return  # already installed in this process
        setattr(pmgr, PASS_NAME, make_pass(original))
    except Exception as e:  # noqa: BLE001
        _glue.warn(f"vllm: arfuse pass not installed, the engine runs as it is: {type(e).__name__}: {e}")
