"""PyTorch integration: tensor-taking wrappers and torch.library custom ops.

Importing this module imports torch; `import arfuse` alone never does. The ops
    arfuse::all_reduce(int comm_id, Tensor inp, Tensor(a!) out) -> ()
    arfuse::all_reduce_add_rmsnorm(int comm_id, Tensor x, Tensor residual_in, Tensor weight, float eps,
                                   Tensor(a!) norm_out, Tensor(b!) residual_out) -> ()
    arfuse::add_rmsnorm(Tensor x, Tensor residual_in, Tensor weight, float eps,
                        Tensor(a!) norm_out, Tensor(b!) residual_out) -> ()
write their outputs in place and enqueue on torch.cuda.current_stream(), so they can be captured in
a CUDA graph and traced by torch.compile (each has a fake implementation that only checks shapes).
Custom ops cannot take Python objects, so the communicator is passed as its integer Communicator.id;
the wrappers below accept a Communicator and do that for you.

Multi-process: from_process_group(group) makes this process's rank of a communicator over a
torch.distributed group, exchanging the handle bytes through the group's all-gather (any backend,
gloo included). Fallback: a call arfuse cannot serve (Unsupported, or a shape or dtype beyond what
the communicator was created for), or a call with no communicator at all (comm=None), is computed
with torch.distributed.all_reduce + add + RMSNorm in fp32, by the header's definition; the choice
depends only on arguments that are equal on every rank, so every rank makes the same one, and it is
logged once (logger "arfuse.torch").
"""
from typing import Any, Dict, Optional, Tuple, Union

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "arfuse.torch needs PyTorch (pip install torch). The core `arfuse` package works without it "
        "on raw device pointers.") from e

from ._coerce import bad
from ._torch_fallback import Choice, choose, counters, note, torch_all_reduce, torch_all_reduce_add_rmsnorm
from ._torch_group import from_process_group, process_group_all_gather, try_from_process_group
from ._types import DataType, Op
from .comm import Communicator

__all__ = ["all_reduce", "all_reduce_add_rmsnorm", "add_rmsnorm", "to_dtype", "comm_id", "from_process_group",
           "try_from_process_group", "process_group_all_gather", "choose", "Choice", "counters",
           "torch_all_reduce", "torch_all_reduce_add_rmsnorm"]

_DTYPES = {torch.bfloat16: DataType.Bfloat16, torch.float16: DataType.Float16, torch.float32: DataType.Float32}
CommLike = Union[Communicator, int]


def to_dtype(dtype: torch.dtype) -> DataType:
    """The arfuse DataType of a torch dtype (bf16, fp16 or fp32), else InvalidArgument."""
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise bad(f"dtype {dtype}: arfuse supports torch.bfloat16, torch.float16 and torch.float32") from None


def comm_id(comm: CommLike) -> int:
    """The integer the custom ops take for a communicator."""
    if isinstance(comm, Communicator):
        comm.handle  # raises InvalidUsage if destroyed
        return comm.id
    if isinstance(comm, int) and not isinstance(comm, bool):
        return comm
    raise bad(f"comm: expected an arfuse.Communicator or its .id, got {type(comm).__name__}")


def _check(op: str, tensors: Dict[str, torch.Tensor], device: Optional[int], fake: bool = False,
           any_dtype: bool = False) -> Tuple[int, int, Optional[DataType]]:
    """Checks tensors for `op` and returns (tokens, hidden, dtype). The first tensor is the input
    [..., hidden]; "weight" must be [hidden]; every other tensor must have the input's shape. All
    share one dtype, are contiguous and (unless fake) live on CUDA device `device` (None: any one).
    any_dtype (for the torch fallback): any dtype is accepted and None is returned for it."""
    names = list(tensors)
    first = tensors[names[0]]
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise bad(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    dtype = None if any_dtype else to_dtype(first.dtype)
    if first.dim() < 1 or first.shape[-1] == 0:
        raise bad(f"{op}: {names[0]} has shape {tuple(first.shape)}: expected [..., hidden] with hidden > 0")
    hidden = int(first.shape[-1])
    tokens = int(first.numel() // hidden)
    for name, t in tensors.items():
        if t.dtype != first.dtype:
            raise bad(f"{op}: {name} is {t.dtype} but {names[0]} is {first.dtype}: all tensors must share one dtype")
        want = (hidden,) if name == "weight" else tuple(first.shape)
        if tuple(t.shape) != want:
            raise bad(f"{op}: {name} has shape {tuple(t.shape)}, expected {want}")
        if not t.is_contiguous():
            raise bad(f"{op}: {name} is not contiguous (strides {t.stride()}): call .contiguous() first")
        if fake:
            continue
        if t.device.type != "cuda":
            raise bad(f"{op}: {name} is on {t.device}: arfuse needs CUDA tensors")
        if device is not None and t.device.index != device:
            raise bad(f"{op}: {name} is on {t.device} but this rank's communicator runs on cuda:{device}")
        if t.device != first.device:
            raise bad(f"{op}: {name} is on {t.device} but {names[0]} is on {first.device}")
    return tokens, hidden, dtype


def _stream(t: torch.Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream


# ---- op bodies (shared by both registration paths) ------------------------------------------------
def _shape_of(t: torch.Tensor) -> Tuple[int, int]:
    hidden = int(t.shape[-1]) if t.dim() >= 1 else 0
    return (int(t.numel() // hidden) if hidden else 0), hidden


def _fallback_choice(comm: Communicator, op: Op, first: torch.Tensor) -> Optional[Choice]:
    """The torch choice for this call when the communicator has a fallback group and arfuse cannot
    serve it; None when arfuse serves it (or there is no fallback group: then arfuse's error stands)."""
    if comm.fallback_group is None:
        return None
    tokens, hidden = _shape_of(first)
    choice = choose(comm, op, tokens, hidden, first.dtype)
    note(comm, op, choice, tokens, hidden, first.dtype)
    return choice if choice.path == "torch" else None


def _all_reduce_impl(comm_id: int, inp: torch.Tensor, out: torch.Tensor) -> None:
    comm = Communicator.from_id(comm_id)
    if _fallback_choice(comm, Op.AllReduce, inp) is not None:
        _check("arfuse::all_reduce", {"inp": inp, "out": out}, comm.device, any_dtype=True)
        torch_all_reduce(inp, out, comm.fallback_group)
        return
    tokens, hidden, dt = _check("arfuse::all_reduce", {"inp": inp, "out": out}, comm.device)
    comm.all_reduce(inp.data_ptr(), out.data_ptr(), tokens, hidden, dt, _stream(inp))


def _all_reduce_fake(comm_id: int, inp: torch.Tensor, out: torch.Tensor) -> None:
    # any dtype: a communicator with a fallback group serves the others through torch
    _check("arfuse::all_reduce", {"inp": inp, "out": out}, None, fake=True, any_dtype=True)


def _fused_tensors(x, residual_in, weight, norm_out, residual_out) -> Dict[str, torch.Tensor]:
    return {"x": x, "residual_in": residual_in, "weight": weight, "norm_out": norm_out, "residual_out": residual_out}


def _fused_impl(comm_id: int, x: torch.Tensor, residual_in: torch.Tensor, weight: torch.Tensor, eps: float,
                norm_out: torch.Tensor, residual_out: torch.Tensor) -> None:
    comm = Communicator.from_id(comm_id)
    tensors = _fused_tensors(x, residual_in, weight, norm_out, residual_out)
    if _fallback_choice(comm, Op.AllReduceAddRmsNorm, x) is not None:
        _check("arfuse::all_reduce_add_rmsnorm", tensors, comm.device, any_dtype=True)
        torch_all_reduce_add_rmsnorm(x, residual_in, weight, eps, norm_out, residual_out, comm.fallback_group)
        return
    tokens, hidden, dt = _check("arfuse::all_reduce_add_rmsnorm", tensors, comm.device)
    comm.all_reduce_add_rmsnorm(x.data_ptr(), residual_in.data_ptr(), weight.data_ptr(), eps, norm_out.data_ptr(),
                                residual_out.data_ptr(), tokens, hidden, dt, _stream(x))


def _fused_fake(comm_id: int, x: torch.Tensor, residual_in: torch.Tensor, weight: torch.Tensor, eps: float,
                norm_out: torch.Tensor, residual_out: torch.Tensor) -> None:
    _check("arfuse::all_reduce_add_rmsnorm", _fused_tensors(x, residual_in, weight, norm_out, residual_out), None,
           fake=True, any_dtype=True)


def _local_impl(x: torch.Tensor, residual_in: torch.Tensor, weight: torch.Tensor, eps: float,
                norm_out: torch.Tensor, residual_out: torch.Tensor) -> None:
    from .comm import add_rmsnorm as _raw

    tokens, hidden, dt = _check("arfuse::add_rmsnorm", _fused_tensors(x, residual_in, weight, norm_out, residual_out),
                                None)
    with torch.cuda.device(x.device):  # the C call runs on the current device
        _raw(x.data_ptr(), residual_in.data_ptr(), weight.data_ptr(), eps, norm_out.data_ptr(),
             residual_out.data_ptr(), tokens, hidden, dt, _stream(x))


def _local_fake(x: torch.Tensor, residual_in: torch.Tensor, weight: torch.Tensor, eps: float,
                norm_out: torch.Tensor, residual_out: torch.Tensor) -> None:
    _check("arfuse::add_rmsnorm", _fused_tensors(x, residual_in, weight, norm_out, residual_out), None, fake=True)


# ---- registration -----------------------------------------------------------------------------------
_SCHEMAS = {
    "all_reduce": ("(int comm_id, Tensor inp, Tensor(a!) out) -> ()", ("out",), _all_reduce_impl, _all_reduce_fake),
    "all_reduce_add_rmsnorm": (
        "(int comm_id, Tensor x, Tensor residual_in, Tensor weight, float eps, Tensor(a!) norm_out, "
        "Tensor(b!) residual_out) -> ()", ("norm_out", "residual_out"), _fused_impl, _fused_fake),
    "add_rmsnorm": (
        "(Tensor x, Tensor residual_in, Tensor weight, float eps, Tensor(a!) norm_out, Tensor(b!) residual_out) -> ()",
        ("norm_out", "residual_out"), _local_impl, _local_fake),
}


def _register() -> None:
    if hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_fake"):  # torch >= 2.4
        for name, (schema, mutates, impl, fake) in _SCHEMAS.items():
            op = torch.library.custom_op(f"arfuse::{name}", impl, mutates_args=mutates, schema=schema)
            op.register_fake(fake)
        return
    # Older torch: the schema by hand, the real kernel for CUDA (and CPU, to give our error), Meta for tracing.
    lib = torch.library.Library("arfuse", "DEF")
    for name, (schema, _, impl, fake) in _SCHEMAS.items():
        lib.define(name + schema)
        lib.impl(name, impl, "CUDA")
        lib.impl(name, impl, "CPU")
        lib.impl(name, fake, "Meta")
    globals()["_torch_library"] = lib  # keep the registration alive


_register()  # once: Python imports this module once per process


# ---- wrappers -----------------------------------------------------------------------------------------
def _no_comm(op: Op, first: torch.Tensor, group: Any) -> None:
    tokens, hidden = _shape_of(first)
    note(None, op, choose(None, op, tokens, hidden, first.dtype), tokens, hidden, first.dtype, group)


def all_reduce(comm: Optional[CommLike], inp: torch.Tensor, out: Optional[torch.Tensor] = None, *,
               group: Any = None) -> torch.Tensor:
    """out = sum over ranks of inp (this rank's [..., hidden] tensor); returns out (new if None).
    out may be inp (in place). Enqueued on the current stream of inp's device. comm=None: computed
    with torch.distributed.all_reduce (fp32) over `group` (None: the default group)."""
    if out is None:
        out = torch.empty_like(inp, memory_format=torch.contiguous_format)
    if comm is None:
        _check("arfuse.torch.all_reduce", {"inp": inp, "out": out}, None, fake=True, any_dtype=True)
        _no_comm(Op.AllReduce, inp, group)
        torch_all_reduce(inp, out, group)
        return out
    torch.ops.arfuse.all_reduce(comm_id(comm), inp, out)
    return out


def all_reduce_add_rmsnorm(comm: Optional[CommLike], x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                           eps: float, norm_out: Optional[torch.Tensor] = None,
                           residual_out: Optional[torch.Tensor] = None, *,
                           group: Any = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """residual_out = residual + all-reduce(x); norm_out = rmsnorm(residual_out) * weight.
    Returns (norm_out, residual_out), allocating those left None. In place: residual_out=residual
    and/or norm_out=x. comm=None: computed with torch.distributed.all_reduce + add + RMSNorm in fp32
    over `group` (None: the default group), by the same definition."""
    if norm_out is None:
        norm_out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if residual_out is None:
        residual_out = torch.empty_like(residual, memory_format=torch.contiguous_format)
    if comm is None:
        _check("arfuse.torch.all_reduce_add_rmsnorm", _fused_tensors(x, residual, weight, norm_out, residual_out),
               None, fake=True, any_dtype=True)
        _no_comm(Op.AllReduceAddRmsNorm, x, group)
        torch_all_reduce_add_rmsnorm(x, residual, weight, float(eps), norm_out, residual_out, group)
        return norm_out, residual_out
    torch.ops.arfuse.all_reduce_add_rmsnorm(comm_id(comm), x, residual, weight, float(eps), norm_out, residual_out)
    return norm_out, residual_out


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                norm_out: Optional[torch.Tensor] = None, residual_out: Optional[torch.Tensor] = None
                ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Single GPU: residual_out = residual + x; norm_out = rmsnorm(residual_out) * weight."""
    if norm_out is None:
        norm_out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if residual_out is None:
        residual_out = torch.empty_like(residual, memory_format=torch.contiguous_format)
    torch.ops.arfuse.add_rmsnorm(x, residual, weight, float(eps), norm_out, residual_out)
    return norm_out, residual_out
