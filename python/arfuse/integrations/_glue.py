"""What the engine plugins share: the on/off variables, one arfuse communicator per engine group,
the group-wide decisions, the per-call choice with its fallback, counters and the startup lines.

Decisions that every rank of a group must make alike are made from values equal on every rank (the
token count, the fixed configuration) or agreed over the engine's CPU group (gloo) with
all_gather_object: a rank that cannot serve makes every rank leave the engine as it was, so no rank
waits in a collective its peers skipped.

The arfuse calls go through a Backend. ArfuseBackend is the real one (arfuse.torch over the C
library); the CPU tests install a fake one through set_backend to exercise this logic without a GPU.

Imports torch lazily (the plugins' register() runs before an engine has imported it).
"""
import logging
import os
import sys
import threading
from collections import Counter
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

log = logging.getLogger("arfuse.integrations")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def _ensure_visible() -> None:
    # Engines configure their own loggers, not ours: without a handler Python would drop INFO lines.
    root = logging.getLogger("arfuse")
    if not root.handlers and not logging.getLogger().handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(h)
        root.setLevel(logging.INFO)
        root.propagate = False


def info(msg: str) -> None:
    _ensure_visible()
    log.info("arfuse INFO %s", msg)


def warn(msg: str) -> None:
    _ensure_visible()
    log.warning("arfuse WARN %s", msg)


def env_flag(name: str) -> bool:
    """True for 1/true/yes/on, False when unset or 0/false/no/off; anything else is refused with a
    WARN (and treated as off: a plugin must never stop the engine from starting)."""
    raw = os.environ.get(name, "")
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v not in _FALSE:
        warn(f"{name}={raw!r} is not understood: use {name}=1 to enable arfuse, 0 or unset to leave it off; "
             f"arfuse stays off")
    return False


def env_positive_int(name: str) -> Optional[int]:
    """The value of `name` as a positive integer, None when unset; raises ValueError naming the fix."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        v = int(raw.strip())
    except ValueError:
        v = 0
    if v <= 0:
        raise ValueError(f"{name}={raw!r}: expected a positive number of tokens (e.g. {name}=256), or unset it")
    return v


# ---- the backend seam ------------------------------------------------------------------------------------
class Choice(NamedTuple):
    path: str  # "arfuse" or "engine"
    reason: str


class ArfuseBackend:
    """The real calls: arfuse.torch communicators over the engine's CPU group, the fused custom op,
    and arfuse's single-GPU add+RMSNorm after the engine's own all-reduce."""

    name = "arfuse"

    def create(self, cpu_group: Any, max_tokens: int, hidden: int, dtype: Any) -> Any:
        """A communicator for this rank of the group; raises (every rank alike) when arfuse cannot
        serve the group."""
        import arfuse.torch as at

        return at.from_process_group(cpu_group, None, max_tokens=max_tokens, max_hidden=hidden, dtypes=[dtype],
                                     fallback=False)

    def choose(self, comm: Any, tokens: int, hidden: int, dtype: Any) -> Choice:
        import arfuse.torch as at
        from arfuse import Op

        c = at.choose(comm, Op.AllReduceAddRmsNorm, tokens, hidden, dtype)
        return Choice("arfuse" if c.path == "arfuse" else "engine", c.reason)

    def plans(self, comm: Any, tokens: List[int], hidden: int, dtype: Any) -> List[Tuple[int, str]]:
        """(tokens, algorithm label) of each token count (for the startup line)."""
        import arfuse.torch as at
        from arfuse import Op

        return [(t, comm.query_plan(Op.AllReduceAddRmsNorm, t, hidden, at.to_dtype(dtype)).algo.label) for t in tokens]

    def fused(self, comm: Any, x: Any, residual: Any, weight: Any, eps: float) -> Tuple[Any, Any]:
        import arfuse.torch as at

        return at.all_reduce_add_rmsnorm(comm, x, residual, weight, eps)

    def add_rmsnorm(self, x: Any, residual: Any, weight: Any, eps: float) -> Tuple[Any, Any]:
        import arfuse.torch as at

        return at.add_rmsnorm(x, residual, weight, eps)

    def epilogue(self, comm: Any, x: Any, residual: Any, weight: Any, eps: float, weight_plus_one: bool = False,
                 scale: Any = None) -> Tuple[Any, Any, Any]:
        """arfuseAllReduceEpilogue: (norm or None, residual_out, FP8 codes or None); FP8 static when
        `scale` (a float32 device tensor) is given, then the norm is not written."""
        import arfuse.torch as at

        o = at.all_reduce_epilogue(comm, x, weight, eps, residual=residual, weight_plus_one=weight_plus_one,
                                   quant="fp8" if scale is not None else None, scale=scale,
                                   want_norm=scale is None)
        return o.norm, o.residual, o.quant

    def epilogue_nvfp4(self, comm: Any, x: Any, residual: Any, weight: Any, eps: float,
                       global_scale: Any) -> Tuple[Any, Any, Any]:
        """arfuseAllReduceEpilogue with NVFP4 (global scale `global_scale`, a float32 device tensor of
        one element) and swizzled 128x4 block scales, no norm written: (residual_out, E2M1 bytes uint8
        [tokens, hidden / 2], block scales uint8 [roundUp(tokens, 128), roundUp(hidden / 16, 4)])."""
        import torch

        import arfuse.torch as at

        hidden = int(x.shape[-1])
        q = torch.empty((int(x.numel() // hidden), hidden // 2), dtype=torch.uint8, device=x.device)
        o = at.all_reduce_epilogue(comm, x, weight, eps, residual=residual, quant="nvfp4",
                                   scale=global_scale.reshape(1), scale_layout="swizzled", quant_out=q,
                                   want_norm=False)
        return o.residual, o.quant, o.scale

    def describe(self, comm: Any) -> str:
        import torch

        major, minor = torch.cuda.get_device_capability(comm.device)
        return f"sm_{major}{minor}"

    def destroy(self, comm: Any) -> None:
        comm.destroy()


_backend: Any = None


def get_backend() -> Any:
    global _backend
    if _backend is None:
        _backend = ArfuseBackend()
    return _backend


def set_backend(backend: Any) -> None:
    """Replaces the backend (tests: a fake one; None: the real one again)."""
    global _backend
    _backend = backend


# ---- counters ------------------------------------------------------------------------------------------
_lock = threading.Lock()
_counts: Counter = Counter()
# ARFUSE_PLUGIN_COUNTERS=DIR: each process writes its counters to DIR/<pid>.json, within a second
# of a change (a daemon timer) and at exit, for a harness that cannot reach the engine's processes
# (scripts/engine_e2e.sh).
_counters_dir = os.environ.get("ARFUSE_PLUGIN_COUNTERS", "")
_flush: List[Any] = [None, False]  # the pending timer, atexit registered


def _write_counters() -> None:
    import json

    with _lock:
        _flush[0] = None
        data = {"/".join(k): v for k, v in _counts.items()}
    try:
        path = os.path.join(_counters_dir, f"{os.getpid()}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(data, f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass  # informative only


def count(engine: str, group: str, path: str) -> None:
    with _lock:
        _counts[(engine, group, path)] += 1
        if not _counters_dir or _flush[0] is not None:
            return
        if not _flush[1]:
            import atexit

            atexit.register(_write_counters)
            _flush[1] = True
        _flush[0] = threading.Timer(1.0, _write_counters)
        _flush[0].daemon = True
        _flush[0].start()


def counters() -> Dict[Tuple[str, str, str], int]:
    with _lock:
        return dict(_counts)


def reset_counters() -> None:
    with _lock:
        _counts.clear()


# ---- group-wide decisions -----------------------------------------------------------------------------
def agree(cpu_group: Any, problem: Optional[str]) -> Optional[str]:
    """Every rank's `problem` (None: this rank can go on) gathered over the CPU group; returns None
    when no rank has one, else the first one prefixed by its rank: the same answer on every rank."""
    import torch.distributed as dist

    out: List[Any] = [None] * dist.get_world_size(cpu_group)
    dist.all_gather_object(out, problem, group=cpu_group)
    for r, p in enumerate(out):
        if p is not None:
            return f"rank {r}: {p}"
    return None


def _plan_summary(pairs: List[Tuple[int, str]], max_tokens: int) -> str:
    """'oneshot <= 64 tokens, twoshot <= 256' from (tokens, label) in increasing tokens."""
    parts: List[str] = []
    for i, (t, label) in enumerate(pairs):
        last = i + 1 == len(pairs)
        if last or pairs[i + 1][1] != label:
            parts.append(f"{label} <= {t}" + (" tokens" if not parts else ""))
    return ", ".join(parts) + f"; the engine's own path above {max_tokens} tokens"


def token_ladder(max_tokens: int) -> List[int]:
    out, t = [], 1
    while t < max_tokens:
        out.append(t)
        t *= 2
    return out + [max_tokens]


class Group(NamedTuple):
    """An engine group as the plugins see it: its name ("tp", "post-experts"), the global ranks in it
    (equal groups share one communicator), this process's rank and the group size, its CPU (gloo)
    process group, and the engine's own all-reduce over it (a callable taking and returning a tensor)."""

    name: str
    ranks: Tuple[int, ...]
    rank: int
    nranks: int
    cpu_group: Any
    all_reduce: Callable[[Any], Any]


class Bound(NamedTuple):
    group: Group
    comm: Any
    max_tokens: int
    hidden: int
    dtype: Any


NOT_OURS = object()  # Fusion.serve: this group has no arfuse communicator


class Fusion:
    """The arfuse state of one engine in this process: the groups it serves and how a call is served.

    decline_safe: whether the engine, handed (None, None), all-reduces on its own (SGLang 0.5.21+). When
    False (SGLang up to 0.5.20, which then normalises the un-reduced input) a call arfuse cannot serve
    runs the group's own all-reduce and arfuse's add+RMSNorm instead: never a declined call."""

    def __init__(self, engine: str, decline_safe: bool, version: str = ""):
        self.engine = engine
        self.version = version  # the engine's version, named in the WARN line
        self.decline_safe = decline_safe
        self.bound: Dict[Tuple[int, ...], Bound] = {}
        self.by_name: Dict[str, Bound] = {}
        self.active = False
        self.max_tokens = 0

    def setup(self, groups: List[Group], agree_over: Any, max_tokens: int, hidden: int, dtype: Any) -> bool:
        """Creates one communicator per distinct group (in the order given, the same on every rank),
        then agrees over `agree_over` (the CPU group spanning them all) that every group on every
        rank has one. On any failure every rank destroys what it made and the engine stays as it
        was (one WARN naming the reason). Returns whether arfuse is active. Never raises."""
        backend = get_backend()
        made: Dict[Tuple[int, ...], Bound] = {}
        problem: Optional[str] = None
        for g in groups:
            if g.ranks in made:
                continue
            if g.nranks < 2:
                continue  # nothing to reduce: the engine does not fuse a group of one
            # Every group is attempted even after a failure: a later group may hold ranks whose first
            # group succeeded, and they would wait in its collective creation for a rank that left.
            try:
                comm = backend.create(g.cpu_group, max_tokens, hidden, dtype)
            except Exception as e:  # noqa: BLE001 - every cause is a reason to leave the engine alone
                problem = problem or f"{g.name} group ({g.nranks} ranks): {type(e).__name__}: {e}"
                continue
            made[g.ranks] = Bound(g, comm, max_tokens, hidden, dtype)
        try:
            if not made and problem is None:
                problem = "no group of 2 or more ranks to fuse"
            verdict = agree(agree_over, problem)
        except Exception as e:  # noqa: BLE001
            verdict = f"the ranks could not agree over the CPU group: {type(e).__name__}: {e}"
        if verdict is not None:
            for b in made.values():
                try:
                    backend.destroy(b.comm)
                except Exception:  # noqa: BLE001
                    pass
            if groups and groups[0].rank == 0:
                label = f"{self.engine} {self.version}" if self.version else self.engine
                warn(f"{label}: arfuse not used, the engine keeps its own all-reduce and norm: {verdict}")
            self.active = False
            return False
        self.bound = made
        self.by_name = {g.name: made[g.ranks] for g in groups if g.ranks in made}
        self.max_tokens = max_tokens
        self.active = True
        for b in made.values():
            self._announce(backend, b)
        return True

    def _announce(self, backend: Any, b: Bound) -> None:
        if b.group.rank != 0:
            return
        names = "/".join(n for n, x in self.by_name.items() if x is b) or b.group.name
        try:
            where = backend.describe(b.comm)
            plans = _plan_summary(backend.plans(b.comm, token_ladder(b.max_tokens), b.hidden, b.dtype), b.max_tokens)
        except Exception as e:  # noqa: BLE001 - the line is informative only
            where, plans = "?", f"plan not available: {e}"
        info(f"{self.engine}: fused AR+RMSNorm on {names} group ({b.group.nranks} ranks, {where}, hidden {b.hidden}, "
             f"{str(b.dtype).replace('torch.', '')}, up to {b.max_tokens} tokens): {plans}")

    def opens(self, tokens: int) -> bool:
        """The gate's arfuse part: active and within the decode size (the same on every rank)."""
        return self.active and 0 < tokens <= self.max_tokens

    def serve(self, group_name: str, x: Any, residual: Any, weight: Any, eps: float, may_decline: bool = True) -> Any:
        """(norm_out, residual_out) for one layer-boundary call over the engine group `group_name`;
        None when the call is handed back to the engine (only where decline_safe and may_decline: a
        call inside a compiled graph cannot return None); NOT_OURS when arfuse holds no communicator
        for that group (the caller runs the engine's original op)."""
        b = self.by_name.get(group_name)
        if b is None:
            return NOT_OURS
        hidden = int(x.shape[-1])
        tokens = int(x.numel() // hidden) if hidden else 0
        # Above the decode size the communicator was made for, arfuse is not asked (the library would
        # refuse the shape with an ERROR line in the server's log): the engine's all-reduce serves it.
        if 0 < tokens <= b.max_tokens and _servable(x, residual, weight):
            choice = get_backend().choose(b.comm, tokens, hidden, x.dtype)
            if choice.path == "arfuse":
                count(self.engine, group_name, "arfuse")
                return get_backend().fused(b.comm, x, residual, weight, eps)
        if self.decline_safe and may_decline:
            count(self.engine, group_name, "declined")
            return None
        count(self.engine, group_name, "engine-all-reduce")
        return add_rmsnorm(b.group.all_reduce(x), residual, weight, eps)

    def destroy(self) -> None:
        for b in self.bound.values():
            try:
                get_backend().destroy(b.comm)
            except Exception:  # noqa: BLE001
                pass
        self.bound, self.by_name, self.active = {}, {}, False


def _servable(x: Any, residual: Any, weight: Any) -> bool:
    # What arfuse's op needs beyond the plan: one dtype and contiguous rows (equal on every rank:
    # the same model code produced these tensors everywhere).
    return (x.dtype == residual.dtype == weight.dtype and x.is_contiguous() and residual.is_contiguous()
            and weight.is_contiguous() and tuple(residual.shape) == tuple(x.shape) and weight.dim() == 1
            and weight.shape[0] == x.shape[-1] and x.device == residual.device == weight.device)


def add_rmsnorm(x: Any, residual: Any, weight: Any, eps: float) -> Tuple[Any, Any]:
    """residual + x, then RMSNorm * weight, after the engine's all-reduce: arfuse's single-GPU op when
    it serves these tensors, else the same definition in fp32 with torch (a dtype mix, a CPU tensor)."""
    if _servable(x, residual, weight) and x.is_cuda:
        try:
            return get_backend().add_rmsnorm(x, residual, weight, eps)
        except Exception as e:  # noqa: BLE001 - a refusal (dtype, hidden) falls to the torch definition
            if type(e).__name__ not in ("InvalidArgument", "Unsupported"):
                raise
    import torch

    res = (residual.float() + x.float()).to(residual.dtype)
    r = res.float()
    norm = (r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
    return norm, res
