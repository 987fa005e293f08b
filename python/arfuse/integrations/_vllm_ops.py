"""The arfuse_vllm ops the vLLM pass puts in place of vLLM's all-reduce + RMSNorm (+ quant) nodes.

A compiled graph outlives the process that built it: vLLM stores it (AOT "mega artifact", Inductor's
cache) and a later launch on a warm cache loads it without ever constructing the pass. So each op
carries, as constant arguments written into the graph by the pass, what it needs to make its state
(the decode window `max_tokens` and the widest hidden size `max_hidden`), and finds or makes that
state at its first call on each rank, as vLLM's own FlashInfer op makes its workspace: one arfuse
communicator over the TP group's CPU (gloo) group, agreed by every rank. Every rank reaches the first
call at the same point of the same graph, so the collective creation pairs up.

When the state cannot be made (library missing, no usable path, the first call inside a CUDA-graph
capture, vLLM's groups not initialised, ...), rank 0 prints ONE WARN naming vLLM's version and the
reason, and every call runs what the graph held before the rewrite: vLLM's own all-reduce, then
vLLM's own (fused-add) RMSNorm (`vllm.ir.ops`), then the quantisation in torch. An op never raises for
want of state.

Within the window, arfuse's fused kernel serves the call when its plan takes it; otherwise vLLM's
all-reduce and arfuse's add+RMSNorm. Imports torch and vLLM: only the vLLM plugin imports this.
"""
import threading
from typing import Any, Optional

import torch

from . import _glue

_lock = threading.Lock()
_fusion: Optional[_glue.Fusion] = None  # this process's state, made by the pass or at the first call
_registered = False


def version() -> str:
    try:
        from importlib.metadata import version as v

        return v("vllm")
    except Exception:  # noqa: BLE001
        return "(version unknown)"


def state() -> Optional[_glue.Fusion]:
    return _fusion


def set_state(f: Optional[_glue.Fusion]) -> None:
    global _fusion
    _fusion = f


def _tp():
    from vllm.distributed import get_tp_group

    return get_tp_group()


def make_state(max_tokens: int, max_hidden: int, dtype: Any, why: str = "") -> _glue.Fusion:
    """This process's Fusion over vLLM's TP group, made once (collective on every rank of the group);
    never raises: a failure is an inactive Fusion and one WARN from rank 0."""
    global _fusion
    with _lock:
        if _fusion is not None:
            return _fusion
        f = _glue.Fusion("vllm", decline_safe=False, version=version())
        try:
            tp = _tp()
            if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                # cudaMalloc, IPC and the self-test cannot run inside a capture; every rank is
                # capturing the same graph here, so every rank takes this branch
                if tp.rank_in_group == 0:
                    _glue.warn(f"vllm {version()}: arfuse not used, the engine keeps its own all-reduce and norm: "
                               f"the first arfuse_vllm call{why} came inside a CUDA-graph capture, where arfuse's "
                               f"state cannot be made")
            else:
                group = _glue.Group("tp", tuple(tp.ranks), int(tp.rank_in_group), int(tp.world_size), tp.cpu_group,
                                    tp.all_reduce)
                f.setup([group], tp.cpu_group, int(max_tokens), int(max_hidden), dtype)
        except Exception as e:  # noqa: BLE001 - never raise inside a forward
            f.active = False
            _glue.warn(f"vllm {version()}: arfuse not used, the engine keeps its own all-reduce and norm: "
                       f"{type(e).__name__}: {e}")
        _fusion = f
        return f


def _active(x: torch.Tensor, max_tokens: int, max_hidden: int) -> Optional[_glue.Fusion]:
    f = _fusion if _fusion is not None else make_state(max_tokens, max_hidden, x.dtype, " (warm start)")
    return f if f.active else None


def _engine_norm(x, residual, weight, eps):
    """What vLLM's graph computed before the rewrite: its all-reduce, then its own norm."""
    import vllm.ir.ops as ir
    from vllm.distributed import tensor_model_parallel_all_reduce

    _glue.count("vllm", "tp", "engine")
    s = tensor_model_parallel_all_reduce(x)
    if residual is None:
        return ir.rms_norm(s, weight, eps), s
    norm, res = ir.fused_add_rms_norm(s, residual, weight, eps)
    return norm, res


def _served(f: _glue.Fusion, x, residual, weight, eps):
    """(norm, residual_out) by arfuse's kernel, or vLLM's all-reduce + arfuse's add+RMSNorm."""
    if residual is None:
        residual = torch.zeros_like(x)  # first layer: residual_out = round(0 + sum) = round(sum)
    out = f.serve("tp", x, residual, weight, eps)
    assert out is not None and out is not _glue.NOT_OURS  # vLLM never declines: decline_safe=False
    return out


def _direct(f: Optional[_glue.Fusion], x, residual, weight):
    """The communicator when arfuse's epilogue serves this call (the same on every rank), else None."""
    b = f.by_name.get("tp") if f is not None else None
    hidden = int(x.shape[-1])
    tokens = int(x.numel() // hidden)
    # above the decode size the library is not asked (as Fusion.serve: it would log its refusal)
    if b is None or not 0 < tokens <= b.max_tokens or not _glue._servable(x, residual, weight):
        return None
    return b.comm if _glue.get_backend().choose(b.comm, tokens, hidden, x.dtype).path == "arfuse" else None


def _fp8(norm, scale):
    return (norm.float() * (1.0 / scale.float())).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def nvfp4_shapes(x):
    """(tokens, E2M1 bytes per row, int32 columns of the swizzled scales, their padded rows): the
    tensors vLLM's scaled_fp4_quant allocates (create_fp4_output_tensors) for a [..., hidden] input."""
    hidden = x.shape[-1]
    tokens = x.numel() // hidden
    return tokens, hidden // 2, (hidden // 16 + 3) // 4, (tokens + 127) // 128 * 128


def register() -> None:
    """Defines the arfuse_vllm ops (once per process)."""
    global _registered
    if _registered:
        return
    lib = "arfuse_vllm::"

    @torch.library.custom_op(lib + "all_reduce_add_rms_norm", mutates_args=())
    def all_reduce_add_rms_norm(x: torch.Tensor, residual: Optional[torch.Tensor], weight: torch.Tensor, eps: float,
                                max_tokens: int, max_hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
        f = _active(x, max_tokens, max_hidden)
        norm, res = _served(f, x, residual, weight, eps) if f else _engine_norm(x, residual, weight, eps)
        return norm, res

    @all_reduce_add_rms_norm.register_fake
    def _(x, residual, weight, eps, max_tokens, max_hidden):
        return torch.empty_like(x), torch.empty_like(x)

    @torch.library.custom_op(lib + "all_reduce_add_rms_norm_fp8", mutates_args=())
    def all_reduce_add_rms_norm_fp8(x: torch.Tensor, residual: Optional[torch.Tensor], weight: torch.Tensor,
                                    eps: float, scale: torch.Tensor, max_tokens: int,
                                    max_hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
        f = _active(x, max_tokens, max_hidden)
        if f is None:
            norm, res = _engine_norm(x, residual, weight, eps)
            return _fp8(norm, scale), res
        res_in = residual if residual is not None else torch.zeros_like(x)
        comm = _direct(f, x, res_in, weight)
        if comm is not None:
            _glue.count("vllm", "tp", "arfuse")
            _, res, q = _glue.get_backend().epilogue(comm, x, res_in, weight, eps, scale=scale)
            return q, res
        norm, res = _served(f, x, res_in, weight, eps)  # vLLM's all-reduce + arfuse's add+RMSNorm, then FP8
        return _fp8(norm, scale), res

    @all_reduce_add_rms_norm_fp8.register_fake
    def _(x, residual, weight, eps, scale, max_tokens, max_hidden):
        return torch.empty_like(x, dtype=torch.float8_e4m3fn), torch.empty_like(x)

    @torch.library.custom_op(lib + "all_reduce_add_rms_norm_plus_one", mutates_args=())
    def all_reduce_add_rms_norm_plus_one(x: torch.Tensor, residual: Optional[torch.Tensor], weight: torch.Tensor,
                                         eps: float, max_tokens: int,
                                         max_hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
        # Gemma: the norm's weight is 1 + w, folded by arfuse's epilogue (weight_plus_one) in fp32
        f = _active(x, max_tokens, max_hidden)
        if f is None:
            norm, res = _engine_norm(x, residual, weight.float() + 1.0, eps)
            return norm, res
        res_in = residual if residual is not None else torch.zeros_like(x)
        comm = _direct(f, x, res_in, weight)
        if comm is not None:
            _glue.count("vllm", "tp", "arfuse")
            norm, res, _ = _glue.get_backend().epilogue(comm, x, res_in, weight, eps, weight_plus_one=True)
            return norm, res
        norm, res = _served(f, x, res_in, weight.float() + 1.0, eps)
        return norm, res

    @all_reduce_add_rms_norm_plus_one.register_fake
    def _(x, residual, weight, eps, max_tokens, max_hidden):
        return torch.empty_like(x), torch.empty_like(x)

    @torch.library.custom_op(lib + "all_reduce_add_rms_norm_nvfp4", mutates_args=())
    def all_reduce_add_rms_norm_nvfp4(x: torch.Tensor, residual: Optional[torch.Tensor], weight: torch.Tensor,
                                      eps: float, global_scale: torch.Tensor, max_tokens: int,
                                      max_hidden: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # (E2M1 bytes [tokens, hidden / 2], residual_out, E4M3 block scales in the swizzled 128x4 layout
        # as vLLM holds them: int32 [roundUp(tokens, 128), roundUp(hidden / 16, 4) / 4], 4 scales a word)
        from arfuse import _torch_quant

        tokens, half, words, rows = nvfp4_shapes(x)
        f = _active(x, max_tokens, max_hidden)
        if f is None:
            norm, res = _engine_norm(x, residual, weight, eps)
        else:
            res_in = residual if residual is not None else torch.zeros_like(x)
            comm = _direct(f, x, res_in, weight)
            if comm is not None:
                _glue.count("vllm", "tp", "arfuse")
                res, q, sf = _glue.get_backend().epilogue_nvfp4(comm, x, res_in, weight, eps, global_scale)
                return q.reshape(tokens, half), res, sf.reshape(rows, words * 4).view(torch.int32)
            norm, res = _served(f, x, res_in, weight, eps)  # vLLM's all-reduce + arfuse's add+RMSNorm
        q, sf = _torch_quant.nvfp4(norm.float().reshape(tokens, 2 * half), global_scale.float(), 1)
        return q, res, sf.reshape(rows, words * 4).view(torch.int32)

    @all_reduce_add_rms_norm_nvfp4.register_fake
    def _(x, residual, weight, eps, global_scale, max_tokens, max_hidden):
        tokens, half, words, rows = nvfp4_shapes(x)
        return (x.new_empty((tokens, half), dtype=torch.uint8), torch.empty_like(x),
                x.new_empty((rows, words), dtype=torch.int32))

    _registered = True
