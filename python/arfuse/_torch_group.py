"""Communicators over a torch.distributed process group (arfuse.torch.from_process_group).

The handle bytes travel through the group's own all-gather (all_gather_object: it works on every
backend, gloo included, which is what several processes sharing one GPU must use since NCCL refuses
two ranks on one device). Before the library is called, the ranks agree that every one of them can
start (library loaded with multi-process support, a CUDA device, a valid config): a rank that cannot
would otherwise leave the others waiting in the library's first all-gather until their timeout.
After that, the library's init is all-or-nothing: every rank gets the same result.

Imported by arfuse.torch only (it imports torch).
"""
import contextlib
import logging
from typing import Any, Callable, List, Optional, Tuple

import torch

from . import _lib
from ._coerce import bad
from ._types import Result
from .comm import Communicator, resolve_config
from .errors import ArfuseError, ArfuseLibraryError, error_class, python_error

log = logging.getLogger("arfuse.torch")


def _dist():
    import torch.distributed as dist

    if not dist.is_available():
        raise python_error(Result.Unsupported, "this torch build has no torch.distributed")
    if not dist.is_initialized():
        raise python_error(Result.InvalidUsage, "torch.distributed is not initialised: call "
                                                "torch.distributed.init_process_group(...) first")
    return dist


def process_group_all_gather(group: Any = None) -> Callable[[bytes], List[bytes]]:
    """An all-gather for Communicator.init_rank_with_all_gather over a torch.distributed group
    (None: the default group): (mine: bytes) -> every rank's bytes, in group rank order."""
    dist = _dist()

    def all_gather(mine: bytes) -> List[bytes]:
        out: List[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(out, mine, group=group)
        return out

    return all_gather


def resolve_device(device: Any) -> int:
    """A CUDA device ordinal from None (torch's current device), an int, "cuda[:i]" or a torch.device."""
    if device is None or (isinstance(device, str) and device == "cuda"):
        if not torch.cuda.is_available():
            raise python_error(Result.NoDevice, "from_process_group: torch sees no CUDA device "
                                                "(torch.cuda.is_available() is False)")
        return torch.cuda.current_device()
    if isinstance(device, (str, torch.device)):
        dev = torch.device(device)
        if dev.type != "cuda":
            raise bad(f"device={device!r}: arfuse runs on CUDA devices")
        return dev.index if dev.index is not None else resolve_device(None)
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    raise bad(f"device={device!r}: pass a CUDA device ordinal, 'cuda:N' or a torch.device")


def _status(e: Optional[BaseException]) -> Optional[Tuple[str, int, str, str]]:
    """What a rank tells the others about its local checks: None (ready) or (kind, code, name, text)."""
    if e is None:
        return None
    if isinstance(e, ArfuseError):
        return ("arfuse", int(e.code), e.name, e.message)
    return ("library", 0, type(e).__name__, str(e))


def _raise_for(rank: int, status: Tuple[str, int, str, str]) -> None:
    kind, code, name, text = status
    prefix = f"from_process_group: rank {rank} of the group cannot create its arfuse communicator"
    if kind == "arfuse":
        body = text[len(name) + 2:] if text.startswith(name + ": ") else text
        raise error_class(code)(code, name, f"{name}: {prefix}: {body}")
    raise ArfuseLibraryError(f"{prefix}: {text}")


def from_process_group(group: Any = None, device: Any = None, config: Any = None, *, fallback: bool = True,
                       **fields: Any) -> Communicator:
    """This process's rank of an arfuse communicator over the torch.distributed `group` (None: the
    default group). rank and nranks are the group's; `device` is this rank's CUDA device (None:
    torch.cuda.current_device(), so call torch.cuda.set_device first when ranks have distinct GPUs;
    ranks may share one GPU). `config` (an arfuse.Config) or the keyword fields of make_config
    (max_tokens, max_hidden, dtypes, algo, timeout_ms, max_blocks) must be equal on every rank.
    With fallback=True the communicator's fallback_group is the group: calls arfuse cannot serve
    run on torch.distributed (see arfuse.torch.choose). Every rank must call this, at the same
    point; every rank gets the same outcome: a communicator, or the same exception."""
    dist = _dist()
    nranks, rank = dist.get_world_size(group), dist.get_rank(group)
    if rank < 0:
        raise python_error(Result.InvalidUsage, "from_process_group: this process is not a member of the group")
    gather = process_group_all_gather(group)
    problem: Optional[BaseException] = None
    dev = cfg = None
    try:
        lib = _lib.lib()
        lib.arfuseCommInitRankWithAllGather  # raises ArfuseLibraryError for a library without it
        dev = resolve_device(device)
        cfg = resolve_config(config, **fields)
    except (ArfuseError, ArfuseLibraryError) as e:
        problem = e
    # all_gather_object on NCCL uses the current device: make it this rank's. A device torch cannot
    # select is left for the library to refuse, on every rank alike.
    usable = dev is not None and torch.cuda.is_available() and 0 <= dev < torch.cuda.device_count()
    with torch.cuda.device(dev) if usable else contextlib.nullcontext():
        statuses: List[Any] = [None] * nranks
        dist.all_gather_object(statuses, _status(problem), group=group)
        failed = [(r, s) for r, s in enumerate(statuses) if s is not None]
        if failed:
            if problem is not None:
                raise problem
            _raise_for(*failed[0])
        comm = Communicator.init_rank_with_all_gather(nranks, rank, dev, gather, cfg)
    comm.fallback_group = (group if group is not None else dist.group.WORLD) if fallback else None
    return comm


_logged_unavailable = set()


def try_from_process_group(group: Any = None, device: Any = None, config: Any = None, **fields: Any
                           ) -> Optional[Communicator]:
    """from_process_group, or None when arfuse cannot make a communicator for this group (no GPU, a
    library without multi-process support, a machine it cannot serve), with the reason logged once
    at WARNING. The outcome is the same on every rank, so `comm is None` is a group-wide decision:
    pass it on to all_reduce_add_rmsnorm / all_reduce, which then use torch.distributed."""
    try:
        return from_process_group(group, device, config, **fields)
    except (ArfuseError, ArfuseLibraryError) as e:
        key = (id(group), type(e).__name__)
        if key not in _logged_unavailable:
            _logged_unavailable.add(key)
            log.warning("arfuse.torch: no arfuse communicator for this process group, its calls will use "
                        "torch.distributed.all_reduce + add + RMSNorm: %s", e)
        return None
