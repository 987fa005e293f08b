"""The torch fallback of arfuse.torch: which path serves a call (choose), and the same operations
computed with torch.distributed.all_reduce + add + RMSNorm when arfuse cannot serve them.

Numerics follow the header's definition, with torch ops: the per-rank inputs are summed in fp32 (the
all-reduce runs on an fp32 copy), the residual is added in fp32 and rounded once to the model dtype,
and the norm is taken of that rounded residual in fp32:
    residual_out = round(float(residual_in) + sum_r float(x_r))
    norm_out     = round(float(residual_out) * rsqrt(mean(float(residual_out)^2) + eps) * float(weight))
Every rank gets the same bits: the collective hands every rank the same sum (NCCL and gloo reduce
each element once and broadcast it), and the rest is a deterministic function of equal inputs. The
summation order is the collective's, not arfuse's rank order, so the two paths can differ in the
last fp32 bit of a sum (rarely visible after rounding to bf16/fp16).

Imported by arfuse.torch only (it imports torch).
"""
import logging
import threading
from collections import Counter
from typing import Any, Dict, NamedTuple, Optional, Tuple

import torch

from ._coerce import op_arg
from ._types import DataType, Op
from .comm import Communicator
from .errors import ArfuseError, InvalidArgument, Unsupported

log = logging.getLogger("arfuse.torch")

_DTYPES = {torch.bfloat16: DataType.Bfloat16, torch.float16: DataType.Float16, torch.float32: DataType.Float32}
OP_NAMES = {Op.AllReduce: "all_reduce", Op.AllReduceAddRmsNorm: "all_reduce_add_rmsnorm"}


class Choice(NamedTuple):
    """Which path serves a call: path is "arfuse" or "torch"; reason says why (for arfuse, the plan's
    reason); error is the library's refusal that sent the call to torch (None otherwise)."""

    path: str
    reason: str
    error: Optional[ArfuseError] = None


_lock = threading.Lock()
_choices: Dict[Tuple[int, int, int, int, Any], Choice] = {}
_CACHE_LIMIT = 4096  # distinct (comm, op, tokens, hidden, dtype); cleared when reached
_logged: set = set()
_counts: Counter = Counter()


def _compiling() -> bool:
    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if fn is None:  # torch < 2.3
        fn = getattr(getattr(torch, "_dynamo", None), "is_compiling", None)
    return bool(fn and fn())


def choose(comm: Optional[Communicator], op: Any, tokens: int, hidden: int, dtype: Any) -> Choice:
    """The path a call with these arguments takes, decided from (op, tokens, hidden, dtype) and the
    communicator only: the same on every rank of a group. "torch" when there is no communicator,
    when the dtype is not one arfuse serves, or when the library refuses the shape with
    Unsupported or InvalidArgument (e.g. tokens above the communicator's maxTokens, a hidden size
    above its limit or not a multiple of 8, a dtype left out of its dtypeMask). Any other error
    (a destroyed communicator, an aborted group) is raised: it is not a property of the shape."""
    op = op_arg(op)
    if comm is None:
        return Choice("torch", "no arfuse communicator")
    key = (comm.id, int(op), int(tokens), int(hidden), dtype)
    with _lock:
        hit = _choices.get(key)
    if hit is not None:
        comm.handle  # still refuse a destroyed communicator
        return hit
    adt = _DTYPES.get(dtype) if isinstance(dtype, torch.dtype) else dtype
    if adt is None:
        choice = Choice("torch", f"dtype {dtype}: arfuse serves bf16, fp16 and fp32")
    else:
        try:
            choice = Choice("arfuse", comm.query_plan(op, tokens, hidden, adt).reason)
        except (Unsupported, InvalidArgument) as e:
            choice = Choice("torch", e.message, e)
    with _lock:
        if len(_choices) >= _CACHE_LIMIT:
            _choices.clear()
        _choices[key] = choice
    return choice


def note(comm: Optional[Communicator], op: Op, choice: Choice, tokens: int, hidden: int, dtype: Any,
         group: Any = None, name: Optional[str] = None) -> None:
    """Counts the call on its path; logs the first fallback per (communicator, op, dtype, hidden,
    cause) at WARNING. Nothing is logged while torch.compile traces. `name` overrides the op's name
    (all_reduce_epilogue is planned as all_reduce_add_rmsnorm and counted under its own name)."""
    name = name or OP_NAMES[op_arg(op)]
    with _lock:
        _counts[(name, choice.path)] += 1
    if choice.path != "torch" or _compiling():
        return
    cause = type(choice.error).__name__ if choice.error is not None else choice.reason
    key = (comm.id if comm is not None else ("group", id(group)), name, str(dtype), hidden, cause)
    with _lock:
        if key in _logged:
            return
        _logged.add(key)
    if comm is not None:
        who = f"communicator id={comm.id} rank={comm.rank}/{comm.nranks}"
    else:
        import torch.distributed as dist

        who = "no communicator"
        if dist.is_available() and dist.is_initialized():
            who = f"rank {dist.get_rank(group)}/{dist.get_world_size(group)}, {who}"
    log.warning("arfuse.torch: %s (tokens=%d hidden=%d %s, %s) runs on torch.distributed.all_reduce + add + "
                "RMSNorm in fp32, not arfuse: %s. Logged once for this communicator, op, dtype, hidden size and "
                "cause; arfuse.torch.counters() counts every call", name, tokens, hidden, dtype, who, choice.reason)


def counters() -> Dict[Tuple[str, str], int]:
    """Calls made per (op, path), path "arfuse" or "torch", since the process started, among the
    calls that go through the choice: those on a communicator with a fallback group, and comm=None.
    A call captured into a CUDA graph counts once, at capture, however often the graph is replayed."""
    with _lock:
        return dict(_counts)


def reset() -> None:
    """Forgets the cached choices, the logged keys and the counters (for tests)."""
    with _lock:
        _choices.clear()
        _logged.clear()
        _counts.clear()


def _all_reduce_fp32(t: torch.Tensor, group: Any) -> torch.Tensor:
    import torch.distributed as dist

    s = t.to(torch.float32, copy=True)  # always a new tensor: the input is never written
    if s.is_cuda and dist.get_backend(group) == "gloo":
        # A gloo-only group (ranks sharing a GPU) reduces through host memory anyway; doing the copy
        # here does not depend on the torch build's gloo CUDA support.
        host = s.cpu()
        dist.all_reduce(host, group=group)
        s.copy_(host)
    else:
        dist.all_reduce(s, group=group)
    return s


def torch_all_reduce(inp: torch.Tensor, out: torch.Tensor, group: Any = None) -> None:
    """out = round(sum over ranks of float(inp)), with torch.distributed over `group` (None: the
    default group). out may be inp."""
    out.copy_(_all_reduce_fp32(inp, group).to(out.dtype))


def torch_all_reduce_add_rmsnorm(x: torch.Tensor, residual_in: torch.Tensor, weight: torch.Tensor, eps: float,
                                 norm_out: torch.Tensor, residual_out: torch.Tensor, group: Any = None) -> None:
    """The fused operation by the header's definition, with torch.distributed.all_reduce over `group`
    (None: the default group) in fp32. Same aliasing as arfuse: residual_out may be residual_in and
    norm_out may be x (every input is read before an output is written)."""
    s = _all_reduce_fp32(x, group)
    res = (residual_in.float() + s).to(residual_out.dtype)
    r = res.float()
    norm = (r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(norm_out.dtype)
    residual_out.copy_(res)
    norm_out.copy_(norm)


def torch_epilogue_from_sum(s: torch.Tensor, residual_in: Optional[torch.Tensor], weight: torch.Tensor, eps: float,
                            dtype: torch.dtype, weight_plus_one: bool = False, quant: int = 0, scale_layout: int = 0,
                            scale_in: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
    """The epilogue of arfuseAllReduceEpilogue from the fp32 all-reduced sum `s` ([tokens, hidden]),
    by the header's definition and docs/quantization.md:
        r = round([residual_in +] s);  n = round(r * rsqrt(mean(r^2) + eps) * w'), w' = w or 1 + w
    (rounded to `dtype`, the model dtype) and the quantised output of n (widened to fp32) per
    _torch_quant. Returns {"residual", "norm"} and, with a quant mode, {"quant": uint8 codes,
    "scale": fp32 [tokens] (FP8 per token) or uint8 block scales (NVFP4, 1-D in scale_layout)}."""
    from . import _torch_quant as tq
    from ._types import Quant

    acc = s if residual_in is None else residual_in.reshape(s.shape).float() + s
    res = acc.to(dtype)
    r = res.float()
    w = weight.float()
    if weight_plus_one:
        w = 1.0 + w
    norm = (r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * w).to(dtype)
    out = {"residual": res, "norm": norm}
    n = norm.float()
    q = int(quant)
    if q == Quant.Fp8Static:
        out["quant"] = tq.fp8_static(n, scale_in)
    elif q == Quant.Fp8PerToken:
        out["quant"], out["scale"] = tq.fp8_per_token(n)
    elif q == Quant.Nvfp4:
        out["quant"], out["scale"] = tq.nvfp4(n, scale_in, scale_layout)
    return out


def torch_all_reduce_epilogue(x: torch.Tensor, residual_in: Optional[torch.Tensor], weight: torch.Tensor, eps: float,
                              *, weight_plus_one: bool = False, quant: int = 0, scale_layout: int = 0,
                              scale_in: Optional[torch.Tensor] = None, norm_out: Optional[torch.Tensor] = None,
                              residual_out: Optional[torch.Tensor] = None, quant_out: Optional[torch.Tensor] = None,
                              scale_out: Optional[torch.Tensor] = None, group: Any = None) -> None:
    """arfuseAllReduceEpilogue computed with torch.distributed.all_reduce over `group` (None: the
    default group) in fp32, then torch_epilogue_from_sum; writes the outputs that are given (already
    checked by the caller: shapes, dtypes, contiguity). Same aliasing as arfuse: residual_out may be
    residual_in and norm_out may be x (every input is read before an output is written). Quantised
    outputs are written as bytes (quant_out may be uint8 or float8_e4m3fn)."""
    hidden = int(x.shape[-1])
    s = _all_reduce_fp32(x, group).reshape(-1, hidden)
    out = torch_epilogue_from_sum(s, residual_in, weight, eps, x.dtype, weight_plus_one, quant, scale_layout,
                                  scale_in)
    if residual_out is not None:
        residual_out.copy_(out["residual"].view(residual_out.shape))
    if norm_out is not None:
        norm_out.copy_(out["norm"].view(norm_out.shape))
    if quant_out is not None and "quant" in out:
        quant_out.view(torch.uint8).copy_(out["quant"].view(quant_out.shape))
    if scale_out is not None and "scale" in out:
        if scale_out.dtype == torch.float32:
            scale_out.copy_(out["scale"].view(scale_out.shape))
        else:
            scale_out.view(torch.uint8).copy_(out["scale"].view(scale_out.shape))
