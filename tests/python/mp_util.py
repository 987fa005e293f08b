"""Running one test function in N processes (spawn: CUDA cannot be forked) that can never hang the
test: every process is joined against one deadline and killed when it passes, or as soon as any rank
fails; each rank's exception comes back with its traceback.

A target is a module-level function target(world, *args) whose return value (picklable) is
collected per rank. `world` gives the rank, nranks, a per-rank queue for the unique id (rank 0
sends it with world.share_from_rank0), and init_dist() for torch.distributed over a file store."""
import multiprocessing
import os
import queue as queue_mod
import tempfile
import time
import traceback
from typing import Any, Callable, List, Optional, Sequence


class World:
    def __init__(self, rank: int, nranks: int, queues: Sequence[Any], store: str, timeout: float):
        self.rank, self.nranks, self.queues, self.store, self.timeout = rank, nranks, queues, store, timeout

    def share_from_rank0(self, value: Any = None) -> Any:
        """Rank 0 passes `value` to every other rank; they return it (bounded wait)."""
        if self.rank == 0:
            for q in self.queues[1:]:
                q.put(value)
            return value
        return self.queues[self.rank].get(timeout=self.timeout)

    def init_dist(self, backend: str = "gloo") -> None:
        import datetime

        import torch.distributed as dist

        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one host: loopback, whatever the hostname says
        dist.init_process_group(backend, init_method=f"file://{self.store}", rank=self.rank, world_size=self.nranks,
                                timeout=datetime.timedelta(seconds=self.timeout))


def _entry(target: Callable, world: World, results: Any, args: tuple) -> None:
    try:
        value = target(world, *args)
        results.put((world.rank, True, value))
    except BaseException:  # noqa: B902 - report everything, then exit nonzero
        results.put((world.rank, False, traceback.format_exc()))
        raise SystemExit(1)
    finally:
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass


def run_ranks(target: Callable, nranks: int, args: tuple = (), timeout: float = 180.0,
              env: Optional[dict] = None) -> List[Any]:
    """Runs target(world, *args) in `nranks` spawned processes; returns their results in rank order.
    Raises AssertionError naming the failing or silent ranks (with tracebacks) after killing every
    process still alive; never waits more than `timeout` seconds in all."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    queues = [ctx.Queue() for _ in range(nranks)]
    tmp = tempfile.mkdtemp(prefix="arfuse-mp-")
    store = os.path.join(tmp, "store")
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})  # spawned children copy the parent's environment at start
    procs = []
    try:
        for r in range(nranks):
            w = World(r, nranks, queues, store, timeout)
            procs.append(ctx.Process(target=_entry, args=(target, w, results, args), name=f"rank{r}", daemon=True))
            procs[-1].start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    deadline = time.monotonic() + timeout
    got, failures = {}, {}
    try:
        while len(got) + len(failures) < nranks:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                rank, ok, value = results.get(timeout=min(left, 1.0))
            except queue_mod.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                silent = [r for r, p in enumerate(procs) if p in dead and r not in got and r not in failures]
                if silent:  # died without reporting (killed, segfault): give its report a moment, then stop
                    time.sleep(0.5)
                    if results.empty():
                        for r in silent:
                            failures[r] = f"rank {r} exited with code {procs[r].exitcode} without reporting"
                continue
            (got if ok else failures)[rank] = value
            if not ok:
                break  # the other ranks may be waiting on the failed one: stop everything
    finally:
        for p in procs:
            if p.is_alive():
                p.join(timeout=max(0.0, min(5.0, deadline - time.monotonic())) if not failures else 0.5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    if failures or len(got) < nranks:
        missing = [r for r in range(nranks) if r not in got and r not in failures]
        parts = [f"--- rank {r} failed:\n{failures[r]}" for r in sorted(failures)]
        if missing:
            parts.append(f"--- ranks {missing} did not finish within {timeout:.0f} s (killed)")
        raise AssertionError(f"{len(failures)} of {nranks} ranks failed\n" + "\n".join(parts))
    return [got[r] for r in range(nranks)]


def run_command(cmd: List[str], timeout: float, env: Optional[dict] = None):
    """subprocess.run for a command that starts processes of its own: it runs in a new session, and
    on timeout the whole process group is killed (not only the command), then AssertionError."""
    import signal
    import subprocess

    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{' '.join(cmd)} did not finish within {timeout:.0f} s (killed)\n{out}\n{err}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything it left behind
        except (ProcessLookupError, PermissionError):
            pass
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
