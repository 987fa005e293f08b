"""PyTorch integration: tensor-taking wrappers and torch.library custom ops.

Importing this module imports torch; `import arfuse` alone never does. The ops
    arfuse::all_reduce(int comm_id, Tensor inp, Tensor(a!) out) -> ()
    arfuse::all_reduce_add_rmsnorm(int comm_id, Tensor x, Tensor residual_in, Tensor weight, float eps,
                                   Tensor(a!) norm_out, Tensor(b!) residual_out) -> ()
    arfuse::add_rmsnorm(Tensor x, Tensor residual_in, Tensor weight, float eps,
                        Tensor(a!) norm_out, Tensor(b!) residual_out) -> ()
    arfuse::all_reduce_epilogue(int comm_id, Tensor x, Tensor? residual_in, Tensor weight, float eps,
                                bool weight_plus_one, int quant, int scale_layout, Tensor? scale_in,
                                Tensor(a!)? norm_out, Tensor(b!)? residual_out, Tensor(c!)? quant_out,
                                Tensor(d!)? scale_out) -> ()
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
from typing import Any, Dict, NamedTuple, Optional, Tuple, Union

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "arfuse.torch needs PyTorch (pip install torch). The core `arfuse` package works without it "
        "on raw device pointers.") from e

from ._coerce import bad
from ._quant_formats import NVFP4_BLOCK, layout_arg, nvfp4_scale_bytes, nvfp4_scale_shape, quant_arg
from ._torch_fallback import (Choice, choose, counters, note, torch_all_reduce, torch_all_reduce_add_rmsnorm,
                              torch_all_reduce_epilogue, torch_epilogue_from_sum)
from ._torch_group import from_process_group, process_group_all_gather, try_from_process_group
from ._types import DataType, Op, Quant
from .comm import Communicator

__all__ = ["all_reduce", "all_reduce_add_rmsnorm", "add_rmsnorm", "all_reduce_epilogue", "EpilogueOutputs",
           "to_dtype", "comm_id", "from_process_group", "try_from_process_group", "process_group_all_gather", "choose",
           "Choice", "counters", "torch_all_reduce", "torch_all_reduce_add_rmsnorm", "torch_all_reduce_epilogue",
           "torch_epilogue_from_sum"]

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


# ---- the extended epilogue (arfuseAllReduceEpilogue) ----------------------------------------------------
_EPI = "arfuse::all_reduce_epilogue"
_FP8_DTYPES = (torch.uint8,) + ((torch.float8_e4m3fn,) if hasattr(torch, "float8_e4m3fn") else ())


def _check_epilogue(op: str, x: torch.Tensor, residual_in: Optional[torch.Tensor], weight: torch.Tensor,
                    quant: int, scale_layout: int, scale_in: Optional[torch.Tensor], norm_out: Optional[torch.Tensor],
                    residual_out: Optional[torch.Tensor], quant_out: Optional[torch.Tensor],
                    scale_out: Optional[torch.Tensor], device: Optional[int], fake: bool = False,
                    any_dtype: bool = False) -> Tuple[int, int, Optional[DataType]]:
    """The epilogue's checks; returns (tokens, hidden, dtype) as _check does. x, residual_in, norm_out
    and residual_out are [..., hidden] in one dtype, weight [hidden]; the quantised tensors by the mode:
      FP8 (static, per token): quant_out uint8 or float8_e4m3fn, x's shape ([..., hidden]) or [tokens, hidden];
      NVFP4: hidden % 16 == 0, quant_out uint8 [..., hidden / 2] or [tokens, hidden / 2];
      FP8 static, NVFP4: scale_in float32 with one element (the device memory the kernel reads);
      FP8 per token: scale_out float32 with `tokens` elements ([tokens], [..], [tokens, 1]);
      NVFP4: scale_out uint8 or float8_e4m3fn, sfBytes(layout, tokens, hidden / 16) bytes: 1-D, or
      2-D [paddedRows, paddedCols] (src/quant/formats.h sfBytes / sfPaddedRows / sfPaddedCols,
      restated in arfuse/_quant_formats.py).
    Only the tensors the mode uses are checked (the library ignores the others, and so does the op)."""
    if isinstance(quant, bool) or not isinstance(quant, int) or int(quant) not in {int(q) for q in Quant}:
        raise bad(f"{op}: quant={quant!r}: use 0 (none), 1 (FP8 static), 2 (FP8 per token) or 3 (NVFP4)")
    if isinstance(scale_layout, bool) or not isinstance(scale_layout, int) or int(scale_layout) not in (0, 1):
        raise bad(f"{op}: scale_layout={scale_layout!r}: use 0 (linear) or 1 (swizzled 128x4)")
    quant, scale_layout = int(quant), int(scale_layout)
    if norm_out is None and residual_out is None and quant == Quant["None"]:
        raise bad(f"{op}: no output requested: pass norm_out, residual_out and/or a quant mode with quant_out")
    tensors = {"x": x}
    for name, t in (("residual_in", residual_in), ("weight", weight), ("norm_out", norm_out),
                    ("residual_out", residual_out)):
        if t is not None:
            tensors[name] = t
    tokens, hidden, dtype = _check(op, tensors, device, fake=fake, any_dtype=any_dtype)
    if quant == Quant["None"]:
        return tokens, hidden, dtype
    lead = tuple(x.shape[:-1])

    def need(name: str, t: Optional[torch.Tensor], why: str) -> torch.Tensor:
        if t is None:
            raise bad(f"{op}: {name} is None: {why}")
        if not isinstance(t, torch.Tensor):
            raise bad(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
        return t

    # `shapes` is a list, never a set: under dynamic shapes the sizes are SymInts, which compare but
    # cannot be hashed (torch.compile's dynamic tracing failed on a set here).
    def shaped(name: str, t: torch.Tensor, dtypes: Tuple[torch.dtype, ...], shapes, what: str) -> None:
        if t.dtype not in dtypes:
            raise bad(f"{op}: {name} is {t.dtype}: expected {' or '.join(str(d) for d in dtypes)}")
        if tuple(t.shape) not in shapes:
            raise bad(f"{op}: {name} has shape {tuple(t.shape)}, expected {what}")
        if not t.is_contiguous():
            raise bad(f"{op}: {name} is not contiguous (strides {t.stride()}): call .contiguous() first")
        if not fake and t.device != x.device:
            raise bad(f"{op}: {name} is on {t.device} but x is on {x.device}")

    if quant in (Quant.Fp8Static, Quant.Nvfp4):
        t = need("scale_in", scale_in, "FP8 static and NVFP4 read their scale from a float32 device tensor")
        shaped("scale_in", t, (torch.float32,), [(), (1,)], "one element ([] or [1])")
    q = need("quant_out", quant_out, "a quant mode writes its values there")
    if quant == Quant.Nvfp4:
        if hidden % NVFP4_BLOCK:
            raise bad(f"{op}: hidden={hidden}: NVFP4 quantises blocks of 16 elements; hidden must be a multiple of 16")
        half = hidden // 2
        shaped("quant_out", q, (torch.uint8,), [lead + (half,), (tokens, half)],
               f"{lead + (half,)} (two E2M1 codes per byte)")
        so = need("scale_out", scale_out, "NVFP4 writes its block scales there")
        nbytes = nvfp4_scale_bytes(scale_layout, tokens, hidden)
        shaped("scale_out", so, _FP8_DTYPES, [(nbytes,), nvfp4_scale_shape(scale_layout, tokens, hidden)],
               f"({nbytes},) or {nvfp4_scale_shape(scale_layout, tokens, hidden)} "
               f"({'swizzled 128x4' if scale_layout else 'linear'} block scales)")
    else:
        shaped("quant_out", q, _FP8_DTYPES, [lead + (hidden,), (tokens, hidden)], f"{lead + (hidden,)}")
        if quant == Quant.Fp8PerToken:
            so = need("scale_out", scale_out, "FP8 per token writes one float32 scale per row there")
            shaped("scale_out", so, (torch.float32,), [lead, (tokens,), (tokens, 1)], f"{lead} or ({tokens},)")
    return tokens, hidden, dtype


def _epilogue_impl(comm_id: int, x: torch.Tensor, residual_in: Optional[torch.Tensor], weight: torch.Tensor,
                   eps: float, weight_plus_one: bool, quant: int, scale_layout: int, scale_in: Optional[torch.Tensor],
                   norm_out: Optional[torch.Tensor], residual_out: Optional[torch.Tensor],
                   quant_out: Optional[torch.Tensor], scale_out: Optional[torch.Tensor]) -> None:
    comm = Communicator.from_id(comm_id)
    args = (x, residual_in, weight, quant, scale_layout, scale_in, norm_out, residual_out, quant_out, scale_out)
    # The epilogue runs the plan of the fused op: ask for that one, count and log it under its own name.
    if comm.fallback_group is not None:
        tokens, hidden = _shape_of(x)
        choice = choose(comm, Op.AllReduceAddRmsNorm, tokens, hidden, x.dtype)
        note(comm, Op.AllReduceAddRmsNorm, choice, tokens, hidden, x.dtype, name="all_reduce_epilogue")
        if choice.path == "torch":
            _check_epilogue(_EPI, *args, comm.device, any_dtype=True)
            torch_all_reduce_epilogue(x, residual_in, weight, eps, weight_plus_one=weight_plus_one, quant=quant,
                                      scale_layout=scale_layout, scale_in=scale_in, norm_out=norm_out,
                                      residual_out=residual_out, quant_out=quant_out, scale_out=scale_out,
                                      group=comm.fallback_group)
            return
    tokens, hidden, dt = _check_epilogue(_EPI, *args, comm.device)
    ptr = lambda t: None if t is None else t.data_ptr()  # noqa: E731
    q = int(quant)
    uses_scale_in = q in (Quant.Fp8Static, Quant.Nvfp4)
    comm.all_reduce_epilogue(x.data_ptr(), weight.data_ptr(), eps, tokens, hidden, dt, residual_in=ptr(residual_in),
                             residual_out=ptr(residual_out), norm_out=ptr(norm_out), weight_plus_one=weight_plus_one,
                             quant=q, quant_out=ptr(quant_out) if q else None,
                             scale_out=ptr(scale_out) if q in (Quant.Fp8PerToken, Quant.Nvfp4) else None,
                             scale_in=ptr(scale_in) if uses_scale_in else None, scale_layout=scale_layout,
                             stream=_stream(x))


def _epilogue_fake(comm_id: int, x: torch.Tensor, residual_in: Optional[torch.Tensor], weight: torch.Tensor,
                   eps: float, weight_plus_one: bool, quant: int, scale_layout: int, scale_in: Optional[torch.Tensor],
                   norm_out: Optional[torch.Tensor], residual_out: Optional[torch.Tensor],
                   quant_out: Optional[torch.Tensor], scale_out: Optional[torch.Tensor]) -> None:
    _check_epilogue(_EPI, x, residual_in, weight, quant, scale_layout, scale_in, norm_out, residual_out, quant_out,
                    scale_out, None, fake=True, any_dtype=True)


# ---- registration -----------------------------------------------------------------------------------
_SCHEMAS = {
    "all_reduce": ("(int comm_id, Tensor inp, Tensor(a!) out) -> ()", ("out",), _all_reduce_impl, _all_reduce_fake),
    "all_reduce_add_rmsnorm": (
        "(int comm_id, Tensor x, Tensor residual_in, Tensor weight, float eps, Tensor(a!) norm_out, "
        "Tensor(b!) residual_out) -> ()", ("norm_out", "residual_out"), _fused_impl, _fused_fake),
    "add_rmsnorm": (
        "(Tensor x, Tensor residual_in, Tensor weight, float eps, Tensor(a!) norm_out, Tensor(b!) residual_out) -> ()",
        ("norm_out", "residual_out"), _local_impl, _local_fake),
    # Optional mutated tensors (Tensor(a!)?): an output left None is not written, as NULL in the C struct.
    "all_reduce_epilogue": (
        "(int comm_id, Tensor x, Tensor? residual_in, Tensor weight, float eps, bool weight_plus_one, int quant, "
        "int scale_layout, Tensor? scale_in, Tensor(a!)? norm_out, Tensor(b!)? residual_out, Tensor(c!)? quant_out, "
        "Tensor(d!)? scale_out) -> ()", ("norm_out", "residual_out", "quant_out", "scale_out"), _epilogue_impl,
        _epilogue_fake),
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


class EpilogueOutputs(NamedTuple):
    """What all_reduce_epilogue wrote: None for an output not asked for. quant: FP8 codes
    (float8_e4m3fn unless you passed a uint8 quant_out) or NVFP4 bytes (uint8 [..., hidden / 2]);
    scale: FP8 per token float32 [...], NVFP4 block scales uint8 [paddedRows, paddedCols]."""

    norm: Optional[torch.Tensor]
    residual: Optional[torch.Tensor]
    quant: Optional[torch.Tensor]
    scale: Optional[torch.Tensor]


def all_reduce_epilogue(comm: Optional[CommLike], x: torch.Tensor, weight: torch.Tensor, eps: float, *,
                        residual: Optional[torch.Tensor] = None, weight_plus_one: bool = False, quant: Any = None,
                        scale: Any = None, scale_layout: Any = "linear", norm_out: Optional[torch.Tensor] = None,
                        residual_out: Optional[torch.Tensor] = None, quant_out: Optional[torch.Tensor] = None,
                        scale_out: Optional[torch.Tensor] = None, want_norm: bool = True, want_residual: bool = True,
                        group: Any = None) -> EpilogueOutputs:
    """arfuseAllReduceEpilogue: r = [residual +] all-reduce(x); n = rmsnorm(r) * (w or 1 + w); and,
    with `quant`, n quantised (docs/quantization.md):
      "fp8"        FP8 E4M3, static scale `scale` (a float32 device tensor of one element; a float is
                   copied to the device, which a CUDA graph capture refuses);
      "fp8-token"  FP8 E4M3 with a float32 scale per row (written to scale_out);
      "nvfp4"      E2M1 codes two per byte, E4M3 block scales (scale_out, in `scale_layout`: "linear"
                   or "swizzled" 128x4), global scale `scale`.
    residual=None: the first layer (residual_out = the sum). Outputs not given are allocated: norm_out
    when want_norm, residual_out when want_residual, and quant_out / scale_out for the mode
    (quant_out float8_e4m3fn for FP8, uint8 [..., hidden / 2] for NVFP4). In place: residual_out=residual,
    norm_out=x. Returns EpilogueOutputs(norm, residual, quant, scale), None for what was not written.
    comm=None: computed with torch.distributed.all_reduce in fp32 over `group` (None: the default
    group) and plain torch, by the same definition, bit for bit in the quantisation."""
    q = quant_arg(quant)
    layout = layout_arg(scale_layout)
    lead, hidden = tuple(x.shape[:-1]), int(x.shape[-1]) if x.dim() else 0
    if norm_out is None and want_norm:
        norm_out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if residual_out is None and want_residual:
        residual_out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if q != Quant["None"] and quant_out is None:
        if q == Quant.Nvfp4:
            quant_out = torch.empty(lead + (hidden // 2,), dtype=torch.uint8, device=x.device)
        else:
            quant_out = torch.empty(lead + (hidden,), dtype=_FP8_DTYPES[-1], device=x.device)
    if scale_out is None and q == Quant.Fp8PerToken:
        scale_out = torch.empty(lead, dtype=torch.float32, device=x.device)
    if scale_out is None and q == Quant.Nvfp4:
        tokens = int(x.numel() // hidden) if hidden else 0
        scale_out = torch.empty(nvfp4_scale_shape(layout, tokens, hidden), dtype=torch.uint8, device=x.device)
    if q in (Quant.Fp8Static, Quant.Nvfp4) and scale is not None and not isinstance(scale, torch.Tensor):
        scale = torch.tensor([float(scale)], dtype=torch.float32, device=x.device)
    scale_in = scale if q in (Quant.Fp8Static, Quant.Nvfp4) else None
    args = (x, residual, weight, float(eps), bool(weight_plus_one), int(q), int(layout), scale_in, norm_out,
            residual_out, quant_out if q != Quant["None"] else None,
            scale_out if q in (Quant.Fp8PerToken, Quant.Nvfp4) else None)
    if comm is None:
        _check_epilogue("arfuse.torch.all_reduce_epilogue", x, residual, weight, int(q), int(layout), scale_in,
                        norm_out, residual_out, args[10], args[11], None, fake=True, any_dtype=True)
        tokens, hidden = _shape_of(x)
        note(None, Op.AllReduceAddRmsNorm, choose(None, Op.AllReduceAddRmsNorm, tokens, hidden, x.dtype), tokens,
             hidden, x.dtype, group, name="all_reduce_epilogue")
        torch_all_reduce_epilogue(x, residual, weight, float(eps), weight_plus_one=bool(weight_plus_one),
                                  quant=int(q), scale_layout=int(layout), scale_in=scale_in, norm_out=norm_out,
                                  residual_out=residual_out, quant_out=args[10], scale_out=args[11], group=group)
    else:
        torch.ops.arfuse.all_reduce_epilogue(comm_id(comm), *args)
    return EpilogueOutputs(norm_out, residual_out, args[10], args[11])
