"""Communicators, plans, the collectives on raw device pointers, and groups."""
import contextlib
import ctypes
import itertools
import os
import threading
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence

from . import _lib
from ._coerce import algo_arg, bad, c_int_arg, dtype_arg, op_arg, ptr_arg, stream_arg
from ._rendezvous import AllGather, AllGatherBridge, UniqueId
from ._types import MAX_RANKS, Algo, Config, DataType, Epilogue, PlanStruct, Result
from .errors import InvalidUsage, python_error


class Plan(NamedTuple):
    """What a call with given arguments will run, and why (arfusePlan_t)."""

    algo: Algo
    blocks: int
    threads: int
    reason: str


def _rank_args(nranks: Any, rank: Any, device: Any):
    """C ints, with the C ABI's own checks made first (1 <= nranks <= MAX_RANKS, 0 <= rank < nranks),
    so that a bad rank never reaches a rendezvous or a framework's all-gather."""
    nranks, rank, device = (c_int_arg("nranks", nranks), c_int_arg("rank", rank), c_int_arg("device", device))
    if not 1 <= nranks <= MAX_RANKS:
        raise bad(f"nranks={nranks}: must be 1..{MAX_RANKS} (arfuse.MAX_RANKS); larger tensor-parallel groups are "
                  "not supported")
    if not 0 <= rank < nranks:
        raise bad(f"rank={rank}: must be 0..{nranks - 1} for nranks={nranks} (each process passes its own, distinct "
                  "rank)")
    return nranks, rank, device


def make_config(max_tokens: Optional[int] = None, max_hidden: Optional[int] = None, dtypes: Any = None,
                algo: Any = None, timeout_ms: Optional[int] = None, max_blocks: Optional[int] = None) -> Config:
    """An arfuseConfig_t from ARFUSE_CONFIG_INITIALIZER with the given fields set; None keeps the
    default (-1), so the environment (ARFUSE_ALGO, ARFUSE_TIMEOUT_MS, ...) may still apply."""
    cfg = Config.initializer(_lib.lib().version_code)
    if max_tokens is not None:
        cfg.maxTokens = c_int_arg("max_tokens", max_tokens)
    if max_hidden is not None:
        cfg.maxHidden = c_int_arg("max_hidden", max_hidden)
    if dtypes is not None:
        if isinstance(dtypes, (str, DataType)) or not isinstance(dtypes, Iterable):
            dtypes = [dtypes]
        mask = 0
        for d in dtypes:
            mask |= dtype_arg(d, "dtypes").bit
        if not mask:
            raise bad("dtypes is empty: list the dtypes the communicator will be used with (e.g. ['bf16'])")
        cfg.dtypeMask = mask
    cfg.algo = algo_arg(algo)
    if timeout_ms is not None:
        cfg.timeoutMs = c_int_arg("timeout_ms", timeout_ms)
    if max_blocks is not None:
        cfg.maxBlocks = c_int_arg("max_blocks", max_blocks)
    return cfg


def resolve_config(config: Optional[Config], **fields: Any) -> Config:
    """`config` as given, or make_config(**fields); passing both is an error."""
    if config is None:
        return make_config(**fields)
    if any(v is not None for v in fields.values()):
        raise bad("pass either config= or the keyword fields, not both")
    if not isinstance(config, Config):
        raise bad(f"config: {type(config).__name__} is not an arfuse.Config (use arfuse.make_config(...))")
    return config


# Integer ids for communicators: torch custom ops cannot take Python objects, so they take the id.
_registry: Dict[int, "Communicator"] = {}
_registry_lock = threading.Lock()
_next_id = itertools.count(1)


class Communicator:
    """One rank of an arfuse group. Create with Communicator.init_all (every rank in this process),
    init_rank / init_rank_with_all_gather (one rank per process), or from_process_group (torch);
    free with destroy() or a `with` block. Methods raise ArfuseError subclasses carrying the
    library's message."""

    def __init__(self, handle: int, *, _token: object = None):
        if _token is not _PRIVATE:
            raise TypeError("use Communicator.init_all(devices, ...), init_rank(...), init_rank_with_all_gather(...) "
                            "or arfuse.torch.from_process_group(...) to create communicators")
        self._lib = _lib.lib()
        self._handle: Optional[int] = handle
        self._info: Dict[str, int] = {}
        # A torch.distributed group over which arfuse.torch computes the calls the library cannot
        # serve (see arfuse.torch); set by arfuse.torch.from_process_group. None: such calls raise.
        self.fallback_group: Any = None
        with _registry_lock:
            self.id = next(_next_id)
            _registry[self.id] = self

    # ---- creation / lookup -----------------------------------------------------------------------
    @classmethod
    def init_all(cls, devices: Sequence[int], *, max_tokens: Optional[int] = None,
                 max_hidden: Optional[int] = None, dtypes: Any = None, algo: Any = None,
                 timeout_ms: Optional[int] = None, max_blocks: Optional[int] = None,
                 config: Optional[Config] = None) -> List["Communicator"]:
        """arfuseCommInitAll: one communicator per entry of `devices` (repeat a device for virtual
        ranks). Keyword arguments left at None keep the library defaults; `config` passes a ready
        Config instead (then the keywords must be None)."""
        lib = _lib.lib()
        config = resolve_config(config, max_tokens=max_tokens, max_hidden=max_hidden, dtypes=dtypes, algo=algo,
                                timeout_ms=timeout_ms, max_blocks=max_blocks)
        devs = [c_int_arg(f"devices[{i}]", d) for i, d in enumerate(devices)]
        n = len(devs)
        dev_arr = (ctypes.c_int * max(n, 1))(*devs)
        comm_arr = (ctypes.c_void_p * max(n, 1))()
        lib.check(lib.arfuseCommInitAll(comm_arr, n, dev_arr, ctypes.byref(config)))
        return [cls(comm_arr[i], _token=_PRIVATE) for i in range(n)]

    @classmethod
    def init_rank(cls, nranks: int, unique_id: Any, rank: int, device: int, config: Optional[Config] = None, *,
                  max_tokens: Optional[int] = None, max_hidden: Optional[int] = None, dtypes: Any = None,
                  algo: Any = None, timeout_ms: Optional[int] = None,
                  max_blocks: Optional[int] = None) -> "Communicator":
        """arfuseCommInitRank: this process's rank of an `nranks` group, on CUDA device `device`.
        `unique_id` is rank 0's UniqueId (or its bytes, or its hex text): rank 0 makes it with
        arfuse.get_unique_id() in its own process and ships it to the others. Every rank passes the
        same nranks, id and config. Blocks until every rank has joined, bounded by the config's
        timeout (at least 30 s); init is all-or-nothing (every rank gets the same error)."""
        _rank_args(nranks, rank, device)
        lib = _lib.lib()
        uid = UniqueId.coerce(unique_id)
        config = resolve_config(config, max_tokens=max_tokens, max_hidden=max_hidden, dtypes=dtypes, algo=algo,
                                timeout_ms=timeout_ms, max_blocks=max_blocks)
        nranks, rank, device = _rank_args(nranks, rank, device)
        fn = lib.arfuseCommInitRank  # a library without multi-process support fails here, clearly
        handle = ctypes.c_void_p()
        lib.check(fn(ctypes.byref(handle), nranks, uid._as_struct(), rank, device, ctypes.byref(config)))
        return cls(handle.value, _token=_PRIVATE)

    @classmethod
    def init_rank_with_all_gather(cls, nranks: int, rank: int, device: int, all_gather: AllGather,
                                  config: Optional[Config] = None, *, max_tokens: Optional[int] = None,
                                  max_hidden: Optional[int] = None, dtypes: Any = None, algo: Any = None,
                                  timeout_ms: Optional[int] = None,
                                  max_blocks: Optional[int] = None) -> "Communicator":
        """arfuseCommInitRankWithAllGather: as init_rank, but the handle bytes travel through
        `all_gather`, a callable (mine: bytes) -> bytes that returns every rank's bytes concatenated
        in rank order (or a list of them, one per rank), e.g. over torch.distributed (see
        arfuse.torch.from_process_group). It is called a few times, the same number on every rank.
        If it raises, the library is told the all-gather failed and the init fails; the raised
        ArfuseError names the Python exception and chains it (__cause__)."""
        lib = _lib.lib()
        config = resolve_config(config, max_tokens=max_tokens, max_hidden=max_hidden, dtypes=dtypes, algo=algo,
                                timeout_ms=timeout_ms, max_blocks=max_blocks)
        nranks, rank, device = _rank_args(nranks, rank, device)
        bridge = AllGatherBridge(all_gather, nranks, rank)
        fn = lib.arfuseCommInitRankWithAllGather
        handle = ctypes.c_void_p()
        # `bridge` (and so bridge.c_fn) stays referenced by this frame for the whole call.
        code = fn(ctypes.byref(handle), nranks, rank, device, ctypes.byref(config), bridge.c_fn, None)
        if bridge.error is not None and isinstance(bridge.error, (KeyboardInterrupt, SystemExit)):
            if code == 0:  # cannot happen by the header's contract; never leak the handle
                lib.arfuseCommDestroy(handle.value)
            raise bridge.error
        if code != 0:
            err = lib.error(code)
            if bridge.error is not None:
                e = bridge.error
                err = type(err)(err.code, err.name,
                                f"{err.message} (the Python all_gather raised {type(e).__name__}: {e})")
                raise err from e
            raise err
        return cls(handle.value, _token=_PRIVATE)

    @classmethod
    def from_process_group(cls, group: Any = None, device: Any = None, config: Optional[Config] = None,
                           **fields: Any) -> "Communicator":
        """arfuse.torch.from_process_group (imports torch): one rank per process of a
        torch.distributed group, initialised through the group's all-gather."""
        import importlib

        return importlib.import_module(".torch", __package__).from_process_group(group, device, config, **fields)

    @classmethod
    def _adopt(cls, handle: int) -> "Communicator":
        """Wraps a raw arfuseComm_t (for tests and for handles created by other bindings)."""
        return cls(handle, _token=_PRIVATE)

    @staticmethod
    def from_id(comm_id: int) -> "Communicator":
        """The live communicator registered under `comm_id` (its .id)."""
        with _registry_lock:
            comm = _registry.get(comm_id)
        if comm is None:
            raise python_error(Result.InvalidArgument,
                               f"comm_id={comm_id}: no live arfuse Communicator has this id (destroyed, or never "
                               f"created in this process); pass Communicator.id")
        return comm

    # ---- handle ---------------------------------------------------------------------------------
    @property
    def handle(self) -> int:
        """The raw arfuseComm_t. Raises InvalidUsage after destroy()."""
        if self._handle is None:
            raise python_error(Result.InvalidUsage,
                               f"communicator id={self.id} was destroyed; create a new group with init_all",
                               InvalidUsage)
        return self._handle

    @property
    def destroyed(self) -> bool:
        return self._handle is None

    def _cached(self, key: str, fn) -> int:
        # Asked of the library once (they never change); still refused after destroy().
        h = self.handle
        value = self._info.get(key)
        if value is None:
            out = ctypes.c_int(0)
            self._lib.check(fn(h, ctypes.byref(out)), h)
            value = self._info[key] = out.value
        return value

    @property
    def rank(self) -> int:
        return self._cached("rank", self._lib.arfuseCommRank)

    @property
    def nranks(self) -> int:
        return self._cached("nranks", self._lib.arfuseCommCount)

    @property
    def device(self) -> int:
        """The CUDA device ordinal of this rank."""
        return self._cached("device", self._lib.arfuseCommDevice)

    @property
    def is_virtual(self) -> bool:
        """True when several ranks of this group share a GPU."""
        return bool(self._cached("is_virtual", self._lib.arfuseCommIsVirtual))

    @property
    def last_error(self) -> str:
        """arfuseCommGetLastError: the text of this communicator's last failure ("" if none)."""
        return (self._lib.arfuseCommGetLastError(self.handle) or b"").decode(errors="replace")

    def async_error(self) -> Result:
        """arfuseCommGetAsyncError: Result.Success, or the asynchronous error (PeerTimeout) recorded
        on this group; non-blocking. See raise_async_error to raise it instead."""
        out = ctypes.c_int(0)
        h = self.handle
        self._lib.check(self._lib.arfuseCommGetAsyncError(h, ctypes.byref(out)), h)
        return Result(out.value)

    def raise_async_error(self) -> None:
        """Raises the group's asynchronous error (e.g. PeerTimeout) with its text, if there is one."""
        code = self.async_error()
        if code != Result.Success:
            raise self._lib.error(code, self.handle)

    def dump_state(self, path: Optional[str] = None) -> None:
        """arfuseCommDumpState: writes this rank's flight recorder (its last calls, as stamped by the
        kernels) and the group's error record, in the format `arfuse triage` reads, to `path` (None or
        "-": stderr; else a file appended to, %p -> process id, %h -> host name). Non-blocking."""
        h = self.handle
        fn = self._lib.arfuseCommDumpState
        self._lib.check(fn(h, None if path is None else os.fsencode(path)), h)

    def query_plan(self, op: Any, tokens: int, hidden: int, dtype: Any) -> Plan:
        """arfuseCommQueryPlan: what a call with these arguments would run and why; launches nothing.
        Raises what the call itself would raise (e.g. Unsupported naming the hidden-size limit)."""
        plan = PlanStruct()
        h = self.handle
        self._lib.check(self._lib.arfuseCommQueryPlan(h, op_arg(op), c_int_arg("tokens", tokens),
                                                      c_int_arg("hidden", hidden), dtype_arg(dtype),
                                                      ctypes.byref(plan)), h)
        return Plan(Algo(plan.algo), plan.blocks, plan.threads, plan.reason.decode(errors="replace"))

    # ---- collectives ------------------------------------------------------------------------------
    def all_reduce(self, in_ptr: Any, out_ptr: Any, tokens: int, hidden: int, dtype: Any, stream: Any = 0) -> None:
        """arfuseAllReduce: out = sum over ranks of in, for a [tokens, hidden] row-major buffer on this
        rank's device; enqueued on `stream` (graph-capturable). out may equal in."""
        h = self.handle
        self._lib.check(self._lib.arfuseAllReduce(ptr_arg("in", in_ptr), ptr_arg("out", out_ptr),
                                                  c_int_arg("tokens", tokens), c_int_arg("hidden", hidden),
                                                  dtype_arg(dtype), h, stream_arg(stream)), h)

    def all_reduce_add_rmsnorm(self, x: Any, residual_in: Any, weight: Any, eps: float, norm_out: Any,
                               residual_out: Any, tokens: int, hidden: int, dtype: Any, stream: Any = 0) -> None:
        """arfuseAllReduceAddRmsNorm: residual_out = residual_in + all-reduce(x);
        norm_out = rmsnorm(residual_out) * weight. residual_out may equal residual_in, norm_out may equal x."""
        h = self.handle
        self._lib.check(self._lib.arfuseAllReduceAddRmsNorm(
            ptr_arg("x", x), ptr_arg("residual_in", residual_in), ptr_arg("weight", weight), _eps_arg(eps),
            ptr_arg("norm_out", norm_out), ptr_arg("residual_out", residual_out), c_int_arg("tokens", tokens),
            c_int_arg("hidden", hidden), dtype_arg(dtype), h, stream_arg(stream)), h)

    def all_reduce_epilogue(self, x: Any, weight: Any, eps: float, tokens: int, hidden: int, dtype: Any, *,
                            residual_in: Any = None, residual_out: Any = None, norm_out: Any = None,
                            weight_plus_one: bool = False, quant: Any = 0, quant_out: Any = None,
                            scale_out: Any = None, scale_in: Any = None, scale_layout: Any = 0,
                            stream: Any = 0) -> None:
        """arfuseAllReduceEpilogue: the fused call with optional outputs (residual_out, norm_out, a
        quantised output: Quant.Fp8Static / Fp8PerToken / Nvfp4 with quant_out, scale_out, scale_in
        and ScaleLayout), weight_plus_one for (1 + w), and residual_in=None for the first layer."""
        h = self.handle
        e = Epilogue.initializer()
        opt = lambda name, p: None if p is None else ptr_arg(name, p)
        e.residualIn = opt("residual_in", residual_in)
        e.residualOut = opt("residual_out", residual_out)
        e.normOut = opt("norm_out", norm_out)
        e.weightPlusOne = 1 if weight_plus_one else 0
        e.quant = int(quant)
        e.quantOut = opt("quant_out", quant_out)
        e.scaleOut = opt("scale_out", scale_out)
        e.scaleIn = opt("scale_in", scale_in)
        e.scaleLayout = int(scale_layout)
        self._lib.check(self._lib.arfuseAllReduceEpilogue(
            ptr_arg("x", x), ptr_arg("weight", weight), _eps_arg(eps), ctypes.byref(e), c_int_arg("tokens", tokens),
            c_int_arg("hidden", hidden), dtype_arg(dtype), h, stream_arg(stream)), h)

    # ---- lifetime ---------------------------------------------------------------------------------
    def destroy(self) -> None:
        """arfuseCommDestroy. Idempotent: the handle is forgotten before the call, so it is never
        passed to the library twice, even when destroy fails."""
        h, self._handle = self._handle, None
        if h is None:
            return
        with _registry_lock:
            _registry.pop(self.id, None)
        self._lib.check(self._lib.arfuseCommDestroy(h))

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    def __repr__(self) -> str:
        if self._handle is None:
            return f"<arfuse.Communicator id={self.id} destroyed>"
        try:
            return (f"<arfuse.Communicator id={self.id} rank={self.rank}/{self.nranks} device={self.device}"
                    f"{' virtual' if self.is_virtual else ''}>")
        except Exception:  # a repr must not raise
            return f"<arfuse.Communicator id={self.id} handle={self._handle:#x}>"


_PRIVATE = object()


def destroy_all(comms: Iterable[Communicator]) -> None:
    """Destroys every communicator; raises the first error after trying them all."""
    first: Optional[BaseException] = None
    for c in comms:
        try:
            c.destroy()
        except Exception as e:  # keep going: every rank must be freed
            first = first or e
    if first is not None:
        raise first


def _eps_arg(eps: Any) -> float:
    try:
        value = float(eps)
    except (TypeError, ValueError):
        raise bad(f"eps={eps!r}: must be a float") from None
    return value  # the library checks finite and > 0 and names eps in its message


def add_rmsnorm(x: Any, residual_in: Any, weight: Any, eps: float, norm_out: Any, residual_out: Any, tokens: int,
                hidden: int, dtype: Any, stream: Any = 0) -> None:
    """arfuseAddRmsNorm (single GPU, no communicator, on the current CUDA device):
    residual_out = residual_in + x; norm_out = rmsnorm(residual_out) * weight."""
    lib = _lib.lib()
    lib.check(lib.arfuseAddRmsNorm(
        ptr_arg("x", x), ptr_arg("residual_in", residual_in), ptr_arg("weight", weight), _eps_arg(eps),
        ptr_arg("norm_out", norm_out), ptr_arg("residual_out", residual_out), c_int_arg("tokens", tokens),
        c_int_arg("hidden", hidden), dtype_arg(dtype), stream_arg(stream)))


@contextlib.contextmanager
def group() -> Iterator[None]:
    """arfuseGroupStart / arfuseGroupEnd around calls made from one thread for several ranks (needed
    when the NCCL path runs that way; harmless otherwise). Groups nest. If the body raises, the group
    is still ended and the body's exception wins."""
    lib = _lib.lib()
    lib.check(lib.arfuseGroupStart())
    try:
        yield
    except BaseException:
        lib.arfuseGroupEnd()
        raise
    lib.check(lib.arfuseGroupEnd())
