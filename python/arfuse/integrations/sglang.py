"""arfuse as SGLang's layer-boundary fusion (all-reduce + residual add + RMSNorm), on any GPU.

Registered as the `arfuse` entry point of the `sglang.srt.plugins` group (SGLang 0.5.11+ runs it in
every process through load_plugins; SGLANG_PLUGINS may whitelist it). It does nothing unless
ARFUSE_SGLANG=1. Then it registers three AROUND hooks with SGLang's HookRegistry, found by probing
attributes (never by version string):

  op     sglang.srt.layers.flashinfer_comm_fusion.flashinfer_allreduce_residual_rmsnorm
         (layernorm imports it inside the function body, so the patched attribute is what it calls)
  gate   ...layer_boundary.residual.add_norm.flashinfer_ar_fusion_applies (0.5.22+),
         ...layer_boundary.residual.add_norm.apply_flashinfer_allreduce_fusion (0.5.21),
         ...layers.communicator.apply_flashinfer_allreduce_fusion (0.5.11-0.5.20)
  setup  BaseRunner._pre_initialize_flashinfer_allreduce_workspace (0.5.14+),
         ModelRunner._pre_initialize_flashinfer_allreduce_workspace (0.5.11-0.5.13)

The setup hook runs on every rank before CUDA-graph capture: it makes one arfuse communicator per
engine group (attention TP, post-experts; equal groups share one) over the group's CPU (gloo) group,
sized for decode, and the ranks agree over the TP CPU group; on any failure the engine is left
exactly as it was (one WARN line). When arfuse is active, FlashInfer's workspace is not allocated,
except where the engine's plain all-reduces run in it too (0.5.18+ with a FlashInfer fusion backend:
there the engine's setup runs as without arfuse). The gate then also says yes for 1..max_tokens
tokens (the same on every rank), and the op serves the call with arfuse.

Under torch.compile (--enable-torch-compile, a fullgraph backend) the op hook calls one torch.library
op, arfuse_sglang::all_reduce_add_rmsnorm, with a fake implementation: the compiler never traces into
the plugin's Python or arfuse's ctypes calls.

The trap: up to 0.5.20, when the op returns (None, None) the caller normalises the un-reduced input
and never all-reduces. Whether the caller all-reduces after a declined call is read from its code
(`_forward_with_allreduce_fusion` names the all-reduce it falls back to, 0.5.21+); where it does not,
a call arfuse cannot serve runs the group's own all-reduce and arfuse's add+RMSNorm: never (None, None).
"""
import importlib
import importlib.util
import inspect
from typing import Any, Callable, Dict, List, NamedTuple, Optional

from . import _glue

ENV = "ARFUSE_SGLANG"
MAX_TOKENS_ENV = "ARFUSE_SGLANG_MAX_TOKENS"
DEFAULT_MAX_TOKENS = 512  # when the engine's decode size cannot be read

OP = "sglang.srt.layers.flashinfer_comm_fusion.flashinfer_allreduce_residual_rmsnorm"
OP_PARAMS = ("input_tensor", "residual", "weight", "eps", "use_attn_tp_group")
GATES = ("sglang.srt.layers.layer_boundary.residual.add_norm.flashinfer_ar_fusion_applies",
         "sglang.srt.layers.layer_boundary.residual.add_norm.apply_flashinfer_allreduce_fusion",
         "sglang.srt.layers.communicator.apply_flashinfer_allreduce_fusion")
SETUPS = ("sglang.srt.model_executor.runner.base_runner.BaseRunner._pre_initialize_flashinfer_allreduce_workspace",
          "sglang.srt.model_executor.model_runner.ModelRunner._pre_initialize_flashinfer_allreduce_workspace")
CALLER = "sglang.srt.layers.layernorm._forward_with_allreduce_fusion"
# Names the caller uses to all-reduce after a declined call (0.5.21+): their presence makes declining safe.
DECLINE_SAFE_NAMES = ("attention_tensor_model_parallel_all_reduce", "deferred_post_experts_all_reduce")


def _resolve(target: str) -> Any:
    """The object at a dotted path (module attributes, then class attributes); raises
    ImportError/AttributeError when absent."""
    parts = target.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(f"no module on the path of {target}")


def _function(obj: Any) -> Any:
    # SGLang's register_custom_op returns a CustomOpWrapper whose op_func is the Python function (or,
    # eagerly registered as in 0.5.11, the torch.ops packet itself: see _signature).
    return getattr(obj, "op_func", obj)


def _signature(obj: Any) -> inspect.Signature:
    """The op's Python parameters: from its function, or from the schema of a torch.ops packet."""
    fn = _function(obj)
    schema = getattr(getattr(fn, "default", None), "_schema", None)
    if schema is None:
        return inspect.signature(fn)
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature([inspect.Parameter(a.name, kind, default=a.default_value if a.has_default_value()
                                                else inspect.Parameter.empty) for a in schema.arguments])


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:  # noqa: BLE001
        return "(version unknown)"


class Shape(NamedTuple):
    """What this SGLang looks like: the targets found, whether declining is safe, and what is missing."""

    op: Optional[str]
    gate: Optional[str]
    setup: Optional[str]
    decline_safe: bool
    missing: List[str]


def probe() -> Shape:
    """Finds the targets in the installed SGLang (imports its modules; no GPU needed)."""
    missing: List[str] = []
    op = None
    try:
        params = _signature(_resolve(OP)).parameters
        lacking = [p for p in OP_PARAMS if p not in params]
        if lacking:
            missing.append(f"{OP} parameters {', '.join(lacking)}")
        else:
            op = OP
    except Exception as e:  # noqa: BLE001
        missing.append(f"{OP} ({type(e).__name__}: {e})")

    def first(targets, what) -> Optional[str]:
        for t in targets:
            try:
                _resolve(t)
                return t
            except Exception:  # noqa: BLE001
                continue
        missing.append(f"{what} (none of {', '.join(targets)})")
        return None

    gate = first(GATES, "the fusion gate")
    setup = first(SETUPS, "the workspace hook run before graph capture")
    decline_safe = False
    try:
        names = set(_function(_resolve(CALLER)).__code__.co_names)
        decline_safe = any(n in names for n in DECLINE_SAFE_NAMES)
    except Exception as e:  # noqa: BLE001
        missing.append(f"{CALLER} ({type(e).__name__}: {e})")
    return Shape(op, gate, setup, decline_safe, missing)


# ---- the process's state ------------------------------------------------------------------------------
_fusion: Optional[_glue.Fusion] = None
_setup_done = False
# The op's parameter names in order and their defaults, read once at register(): binding a call with
# them (rather than with inspect.Signature.bind) is plain Python that torch.compile traces.
_op_params: Optional[tuple] = None
_op_defaults: Dict[str, Any] = {}
GROUPS = ("tp", "post-experts")  # the arfuse_sglang op's group argument indexes this


def fusion() -> Optional[_glue.Fusion]:
    """This process's arfuse state for SGLang (None before the setup hook ran)."""
    return _fusion


def _groups() -> Dict[str, Any]:
    """{"tp": coordinator, "post-experts": coordinator, "world": the TP coordinator}: the groups the
    FlashInfer path of this SGLang reduces over (so arfuse reduces over the same peers)."""
    fc = importlib.import_module("sglang.srt.layers.flashinfer_comm_fusion")
    if hasattr(fc, "resolve_fusion_group"):  # 0.5.21+
        attn = fc.resolve_fusion_group(use_attn_tp_group=True)[2]
        post = fc.resolve_fusion_group(use_attn_tp_group=False)[2]
        world = fc.get_parallel().tp_group
    else:  # 0.5.11-0.5.20: the coordinators ensure_workspace_initialized uses
        attn = fc.get_attn_tp_group()
        ep = fc.get_moe_ep_group()
        post = ep if ep.world_size > 1 else fc.get_moe_tp_group()
        world = fc.get_tp_group()
    return {"tp": attn, "post-experts": post, "world": world}


def _as_group(name: str, c: Any) -> _glue.Group:
    return _glue.Group(name, tuple(c.ranks), int(c.rank_in_group), int(c.world_size), c.cpu_group, c.all_reduce)


CAPTURE_SIZES = ("sglang.srt.model_executor.runner.base_cuda_graph_runner.get_batch_sizes_to_capture",  # 0.5.14+
                 "sglang.srt.model_executor.cuda_graph_runner.get_batch_sizes_to_capture")  # 0.5.11-0.5.13


def _tokens_per_request(mr: Any) -> int:
    if callable(getattr(mr, "decode_num_tokens_per_req", None)):  # 0.5.16+
        return max(int(mr.decode_num_tokens_per_req()), 1)
    sa = getattr(mr, "server_args", None)
    if getattr(sa, "speculative_algorithm", None) and getattr(sa, "speculative_num_draft_tokens", None):
        return int(sa.speculative_num_draft_tokens)  # a verify pass reads this many tokens per request
    return 1


def _decode_tokens(runner: Any, mr: Any) -> int:
    """The largest token count of a captured decode batch (not prefill): ARFUSE_SGLANG_MAX_TOKENS, else
    the runner's own widest decode rows (0.5.21+), else the engine's list of CUDA-graph batch sizes
    times the tokens per request (speculative verify), else DEFAULT_MAX_TOKENS."""
    explicit = _glue.env_positive_int(MAX_TOKENS_ENV)
    if explicit:
        return explicit
    widest = getattr(runner, "_widest_decode_rows", None)
    if callable(widest):
        try:
            rows = widest()
            if rows:
                return int(rows)
        except Exception:  # noqa: BLE001 - try the next source
            pass
    per = _tokens_per_request(mr)
    for target in CAPTURE_SIZES:
        try:
            capture_bs = _resolve(target)(mr, per)[0]
            if capture_bs:
                return int(max(capture_bs)) * per
        except Exception:  # noqa: BLE001
            continue
    bs = getattr(getattr(mr, "server_args", None), "cuda_graph_bs", None)
    if bs:
        return int(max(bs)) * per
    return DEFAULT_MAX_TOKENS


def _refusal(gate_fn: Any) -> Optional[str]:
    """A configuration the engine keeps to itself (the same on every rank), or None. Read through the
    gate's own module, where the engine's gate reads it."""
    g = getattr(inspect.unwrap(gate_fn), "__globals__", {})
    dp = g.get("is_dp_attention_enabled")
    if callable(dp) and dp():
        return "data-parallel attention is enabled (the engine does not fuse there)"
    cute = g.get("uses_cutedsl_ar_fusion")
    if callable(cute) and cute():
        return "--flashinfer-allreduce-fusion-backend cutedsl runs its own fused path"
    return None


def setup(runner: Any) -> Optional[_glue.Fusion]:
    """Makes the communicators for this engine (every rank, same point, outside graph capture)."""
    global _fusion, _setup_done
    if _setup_done:
        return _fusion
    _setup_done = True
    shape = probe()
    f = _glue.Fusion("sglang", shape.decline_safe, version=_version())
    mr = getattr(runner, "model_runner", runner)
    problem, world = None, None
    try:
        groups = _groups()
        world = groups["world"]
        problem = _refusal(_resolve(shape.gate)) if shape.gate else "no fusion gate"
        max_tokens = _decode_tokens(runner, mr)
        hidden = int(mr.model_config.hidden_size)
        dtype = mr.dtype
    except Exception as e:  # noqa: BLE001
        problem = f"{type(e).__name__}: {e}"
    if world is not None:
        # Agreed before any communicator is made: a rank that stops here alone would leave the
        # others waiting in the collective creation.
        try:
            problem = _glue.agree(world.cpu_group, problem)
        except Exception as e:  # noqa: BLE001
            problem = f"the ranks could not agree over the TP CPU group: {type(e).__name__}: {e}"
    if problem is not None:
        if world is None or world.rank_in_group == 0:
            _glue.warn(f"sglang {_version()}: arfuse not used, the engine keeps its own all-reduce and norm: "
                       f"{problem}")
        _fusion = f
        return f
    f.setup([_as_group("tp", groups["tp"]), _as_group("post-experts", groups["post-experts"])], world.cpu_group,
            max_tokens, hidden, dtype)
    if f.active:
        _register_ops()  # here, eagerly: never for the first time inside a torch.compile trace
    _fusion = f
    return f


# ---- the op a compiled graph calls -------------------------------------------------------------------
_ops_registered = False


def _register_ops() -> None:
    """arfuse_sglang::all_reduce_add_rmsnorm(x, residual, weight, eps, group) -> (norm, residual_out):
    the layer-boundary call as one torch.library op with a fake implementation, so that torch.compile
    (SGLang's --enable-torch-compile, or any fullgraph backend) keeps it whole instead of tracing into
    the plugin's Python and arfuse's ctypes calls. It never declines: a graph cannot return (None, None),
    so a call arfuse cannot serve runs the group's own all-reduce and arfuse's add+RMSNorm."""
    global _ops_registered
    if _ops_registered:
        return
    import torch

    @torch.library.custom_op("arfuse_sglang::all_reduce_add_rmsnorm", mutates_args=())
    def all_reduce_add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                               group: int) -> tuple[torch.Tensor, torch.Tensor]:
        f = _fusion
        if f is None or not f.active:
            raise RuntimeError("arfuse_sglang op called without an active arfuse communicator (the plugin puts "
                               "it in a graph only when one is active)")
        norm, res = f.serve(GROUPS[group], x, residual, weight, eps, may_decline=False)
        return norm, res

    @all_reduce_add_rmsnorm.register_fake
    def _(x, residual, weight, eps, group):
        return torch.empty_like(x), torch.empty_like(residual)

    _ops_registered = True


# ---- the hooks (HookType.AROUND: hook(original, *args, **kwargs)) ---------------------------------------
def _plain_all_reduce_uses_workspace() -> bool:
    """Whether the engine's plain all-reduces also run in FlashInfer's fusion workspace: 0.5.18+ with a
    FlashInfer fusion backend (which 0.5.23 turns on by itself on SM90 / SM100 for the common models)
    tags the attention-TP and MoE coordinators (GroupCoordinator._fi_workspace_hint, set at group
    creation from the configuration, so the same on every rank) and sends their all-reduces to
    FlashInfer's allreduce-only kernel while the workspace exists."""
    try:
        groups = _groups()
    except Exception:  # noqa: BLE001 - no groups: nothing of the engine's to keep
        return False
    return any(getattr(c, "_fi_workspace_hint", None) is not None for c in (groups["tp"], groups["post-experts"]))


def setup_hook(original: Callable, runner: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        f = setup(runner)
    except Exception as e:  # noqa: BLE001 - a plugin must never stop the server
        _glue.warn(f"sglang: arfuse setup failed, the engine keeps its own path: {type(e).__name__}: {e}")
        f = None
    if f is not None and f.active and not _plain_all_reduce_uses_workspace():
        return None  # FlashInfer's workspace would never be used: every fused call is arfuse's
    # Without arfuse, or where the engine's plain all-reduces use the workspace: skipping it would
    # move them (and a declined call's all-reduce) off FlashInfer's kernel onto the engine's next one.
    return original(runner, *args, **kwargs)


def gate_hook(original: Callable, batch_size: Any, *args: Any, **kwargs: Any) -> Any:
    f = _fusion
    if f is not None and f.opens(batch_size):
        return True
    return original(batch_size, *args, **kwargs)


def _bind(args: tuple, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    p = dict(_op_defaults)
    for name, a in zip(_op_params or (), args):
        p[name] = a
    p.update(kwargs)
    return p


def op_hook(original: Callable, *args: Any, **kwargs: Any) -> Any:
    f = _fusion
    if f is None or not f.active:
        return original(*args, **kwargs)
    p = _bind(args, kwargs)
    group = "tp" if p["use_attn_tp_group"] else "post-experts"
    if group not in f.by_name:
        return original(*args, **kwargs)
    import torch

    if torch.compiler.is_compiling():
        # traced by torch.compile: one opaque op (decided per call when the graph runs)
        return torch.ops.arfuse_sglang.all_reduce_add_rmsnorm(p["input_tensor"], p["residual"], p["weight"],
                                                              float(p["eps"]), GROUPS.index(group))
    out = f.serve(group, p["input_tensor"], p["residual"], p["weight"], float(p["eps"]))
    if out is None:
        return None, None  # only where the caller all-reduces on its own (Fusion.decline_safe)
    return out


def register() -> None:
    """The entry point: registers the hooks when ARFUSE_SGLANG=1; never raises."""
    global _op_params, _op_defaults
    if not _glue.env_flag(ENV):
        return
    if importlib.util.find_spec("sglang") is None:
        _glue.warn("sglang: SGLang is not installed in this Python: nothing patched")
        return
    try:
        shape = probe()
        if shape.missing:
            _glue.warn(f"sglang {_version()}: unknown engine shape, nothing patched (the engine runs as it is): "
                       f"missing {'; '.join(shape.missing)}")
            return
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType

        sig = _signature(_resolve(shape.op))
        _op_params = tuple(sig.parameters)
        _op_defaults = {n: q.default for n, q in sig.parameters.items() if q.default is not inspect.Parameter.empty}

        HookRegistry.register(shape.op, op_hook, HookType.AROUND)
        HookRegistry.register(shape.gate, gate_hook, HookType.AROUND)
        HookRegistry.register(shape.setup, setup_hook, HookType.AROUND)
    except Exception as e:  # noqa: BLE001 - SGLang only logs a plugin's exception; say it our way too
        _glue.warn(f"sglang {_version()}: arfuse plugin not registered, the engine runs as it is: "
                   f"{type(e).__name__}: {e}")
