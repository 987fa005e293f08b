"""The peers of bench/peers.py, on the GPU (its docstring says what each one is and how it is timed).

Each peer answers: unsupported(tokens) -> reason or "", call(...) for the fp64 check (separate
outputs, fresh inputs), step(...) for the timed graph (call i on input set i % sets, the residual
chained in place as `arfuse bench` chains it), extra() -> JSON members (e.g. the NCCL kernels seen).
"""
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback

import peers as P
import torch
import torch.distributed as dist


# ---- single GPU: add + RMSNorm ---------------------------------------------------------------------------
class SingleArfuse:
    note = "arfuseAddRmsNorm through the arfuse::add_rmsnorm torch op"

    def __init__(self, a):
        import arfuse.torch as at
        self.at, self.eps = at, a.eps

    def call(self, x, res_in, w, res_out, norm_out):
        self.at.add_rmsnorm(x, res_in, w, self.eps, norm_out, res_out)

    def step(self, x, res, w, norm):
        self.at.add_rmsnorm(x, res, w, self.eps, norm, res)


class SingleCompile:
    note = "torch.compile (inductor) of residual += x; rmsnorm(residual) * w, fp32 inside"

    def __init__(self, a):
        self.fn, self.eps = P.compiled_add_rmsnorm(), a.eps

    def call(self, x, res_in, w, res_out, norm_out):
        res_out.copy_(res_in)
        norm_out.copy_(self.fn(x, res_out, w, self.eps))

    def step(self, x, res, w, norm):
        self.fn(x, res, w, self.eps)


class SingleFlashInfer:
    note = ("flashinfer.norm.fused_add_rmsnorm (in place: x becomes the norm), CUDA JIT backend "
            "(FLASHINFER_USE_CUDA_NORM=1; the CuTe-DSL one needs nvidia-cutlass-dsl), PDL as FlashInfer decides")

    def __init__(self, a):
        import flashinfer.norm as fn
        self.f, self.eps = fn.fused_add_rmsnorm, a.eps

    def call(self, x, res_in, w, res_out, norm_out):
        norm_out.copy_(x)
        res_out.copy_(res_in)
        self.f(norm_out, res_out, w, self.eps)

    def step(self, x, res, w, norm):
        self.f(x, res, w, self.eps)


SINGLE = {"arfuse": SingleArfuse, "torch-compile": SingleCompile, "flashinfer": SingleFlashInfer}


def single_check(impl, a, t, dtype, dev):
    x = P.randn_like_seeded((t, a.hidden), a.seed * 1000 + t, dtype, dev)
    res = P.randn_like_seeded((t, a.hidden), a.seed * 1000 + t + 1, dtype, dev)
    w = P.randn_like_seeded((a.hidden,), a.seed * 1000 + t + 2, dtype, dev, 0.5, 1.5)
    res_out = torch.full_like(res, float("nan"))  # poisoned
    norm_out = torch.full_like(x, float("nan"))
    impl.call(x, res, w, res_out, norm_out)
    torch.cuda.synchronize()
    ref_res, ref_norm = P.reference(x.double(), res, w, a.eps, dtype)
    e_res, e_norm = P.rel_err(res_out, ref_res), P.rel_err(norm_out, ref_norm)
    tol = P.TOLERANCE[a.dtype]
    return (0, "") if e_res <= tol and e_norm <= tol else (1, f"check failed against fp64: err_residual={e_res:.3e} "
                                                              f"err_norm={e_norm:.3e} (tol {tol})")


def run_single(a, env):
    if not torch.cuda.is_available():
        return [P.make_row(p, t, 0, error="no CUDA device visible to torch") for t in a.tokens for p in a.peers]
    dev, dtype = torch.device("cuda", 0), P.dtype_of(a.dtype)
    es, l2 = torch.tensor([], dtype=dtype).element_size(), env.get("l2_bytes", 0)
    impls = {}
    for name in a.peers:
        if name == "copy":
            continue
        try:
            impls[name] = SINGLE[name](a)
        except Exception as e:  # a package that is not there: every row says so
            impls[name] = P.why(e)
    rows = []
    print(f"# single GPU add+RMSNorm peers, hidden {a.hidden}, {a.dtype}; L2 {l2 >> 20} MiB")
    print(f"{'tokens':>8} {'peer':>14} {'time_us':>10} {'GB/s':>8} {'sets':>5} {'#wrong':>6}")
    for t in a.tokens:
        nbytes = t * a.hidden * es
        moved = 4 * nbytes + a.hidden * es  # read x, residual, weight; write residual, norm (bench's count)
        set_bytes = 3 * nbytes
        sets = P.rotation_sets(set_bytes, l2, a.calls)
        xs = [P.randn_like_seeded((t, a.hidden), a.seed + 10 * k, dtype, dev) for k in range(sets)]
        ress = [P.randn_like_seeded((t, a.hidden), a.seed + 10 * k + 1, dtype, dev) for k in range(sets)]
        norms = [torch.empty_like(xs[0]) for _ in range(sets)]
        w = P.randn_like_seeded((a.hidden,), a.seed + 2, dtype, dev, 0.5, 1.5)
        for name in a.peers:
            row = dict(sets=sets, footprint=sets * set_bytes, l2_bytes=l2)
            try:
                if name == "copy":  # the same bytes moved (read + written), rotated by the same rule
                    half = (moved // 2 + 15) // 16 * 16
                    cs = P.rotation_sets(2 * half, l2, a.calls)
                    src = [torch.randint(0, 255, (half,), dtype=torch.uint8, device=dev) for _ in range(cs)]
                    dst = [torch.empty_like(s) for s in src]
                    timer = P.GraphTimer(lambda i: dst[i % cs].copy_(src[i % cs]), a.calls)
                    row.update(sets=cs, footprint=cs * 2 * half)
                    rows.append(P.make_row(name, t, moved, role="copy", timing=P.summarize(
                        [timer.run(a.iters, a.warmup)], a.calls), note="torch copy_ of the same bytes", **row))
                    continue
                impl = impls[name]
                if isinstance(impl, str):
                    rows.append(P.make_row(name, t, moved, error=f"cannot run here: {impl}", **row))
                    continue
                wrong, err = single_check(impl, a, t, dtype, dev)
                timer = P.GraphTimer(lambda i: impl.step(xs[i % sets], ress[i % sets], w, norms[i % sets]), a.calls)
                env["timing"] = timer.method
                rows.append(P.make_row(name, t, moved, timing=P.summarize([timer.run(a.iters, a.warmup)], a.calls),
                                       wrong=wrong, note=(err + "; " if err else "") + impl.note, **row))
            except Exception as e:
                rows.append(P.make_row(name, t, moved, error=P.why(e), **row))
            r = rows[-1]
            print(f"{t:>8} {name:>14} {r.get('median_us', float('nan')):>10.2f} {r.get('algbw_GBps', 0):>8.0f} "
                  f"{sets:>5} {r['wrong']:>6}  {r.get('error', '')}", flush=True)
    return rows


# ---- multi GPU: all-reduce + add + RMSNorm ---------------------------------------------------------------
class Peer:
    note = ""

    def unsupported(self, tokens):
        return ""

    def extra(self):
        return {}

    def close(self):
        pass


class ArfusePeer(Peer):
    note = "arfuse.torch.all_reduce_add_rmsnorm, communicator from the process group (fallback off)"

    def __init__(self, a, rank, n, dev, max_tokens):
        import arfuse.torch as at
        self.at, self.eps = at, a.eps
        self.comm = at.from_process_group(None, device=dev, fallback=False, max_tokens=max_tokens, max_hidden=a.hidden)

    def call(self, x, res_in, w, res_out, norm_out):
        self.at.all_reduce_add_rmsnorm(self.comm, x, res_in, w, self.eps, norm_out, res_out)

    def step(self, x, res, w, norm, k):
        self.at.all_reduce_add_rmsnorm(self.comm, x, res, w, self.eps, norm, res)

    def close(self):
        self.comm.destroy()


class FlashInferPeer(Peer):
    def __init__(self, a, rank, n, dev, max_tokens, oneshot):
        import flashinfer.comm.trtllm_ar as tar
        self.tar, self.a, self.rank, self.n, self.oneshot = tar, a, rank, n, oneshot
        self.handles, self.ws = tar.trtllm_create_ipc_workspace_for_all_reduce_fusion(
            rank, n, max_tokens, a.hidden, use_fp32_lamport=a.dtype == "fp32", group=dist.group.WORLD)[:2]
        self.note = (f"trtllm_allreduce_fusion kARResidualRMSNorm, {'one' if oneshot else 'two'}-shot, PDL on, "
                     "fp32 accumulation, trigger_completion_at_end")

    def unsupported(self, tokens):
        if not self.oneshot and tokens <= self.n:
            return f"n/a: FlashInfer's two-shot needs more tokens than ranks ({self.n})"
        if self.oneshot and tokens * self.a.hidden * 2 * self.n > getattr(self.tar, "MAX_COMM_SIZE", 1 << 62):
            return "n/a: above FlashInfer's one-shot (lamport) buffer"
        return ""

    def call(self, x, res_in, w, res_out, norm_out):
        self.tar.trtllm_allreduce_fusion(
            allreduce_in=x, world_size=self.n, world_rank=self.rank, token_num=x.shape[0], hidden_dim=x.shape[1],
            workspace_ptrs=self.ws, launch_with_pdl=True, trigger_completion_at_end=True, fp32_acc=True,
            pattern_code=self.tar.AllReduceFusionPattern.kARResidualRMSNorm, use_oneshot=self.oneshot,
            allreduce_out=None, residual_in=res_in, residual_out=res_out, norm_out=norm_out, quant_out=None,
            scale_out=None, rms_gamma=w, rms_eps=self.a.eps, scale_factor=None, layout_code=None)

    def step(self, x, res, w, norm, k):
        self.call(x, res, w, res, norm)

    def close(self):
        self.tar.trtllm_destroy_ipc_workspace_for_all_reduce_fusion(self.handles, group=dist.group.WORLD)


class TorchSymmPeer(Peer):
    def __init__(self, a, rank, n, dev, max_tokens, oneshot):
        import torch.distributed._symmetric_memory as symm_mem
        self.a, self.oneshot, self.name = a, oneshot, dist.group.WORLD.group_name
        if hasattr(symm_mem, "enable_symm_mem_for_group"):
            symm_mem.enable_symm_mem_for_group(self.name)
        dtype = P.dtype_of(a.dtype)
        self.buf = symm_mem.empty(max_tokens * a.hidden, dtype=dtype, device=torch.device("cuda", dev))
        symm_mem.rendezvous(self.buf, self.name)
        self.sum = torch.empty(max_tokens, a.hidden, dtype=dtype, device=torch.device("cuda", dev))
        self.fn = P.compiled_add_rmsnorm()
        self.copy_out = oneshot and hasattr(torch.ops.symm_mem, "one_shot_all_reduce_copy_out")
        self.note = (("one_shot_all_reduce_copy_out (the kernel copies x in)" if self.copy_out else
                      "x copied into the symmetric buffer, one_shot_all_reduce_out") if oneshot else
                     "x copied into the symmetric buffer, two_shot_all_reduce_out (torch's own lowering)") + \
            " + torch.compile'd add+RMSNorm; multicast off"

    def _reduce(self, x):
        view, s = self.buf[:x.numel()].view_as(x), self.sum[:x.shape[0]]
        if self.copy_out:
            torch.ops.symm_mem.one_shot_all_reduce_copy_out(view, x, "sum", self.name, s)
        else:
            view.copy_(x)
            op = torch.ops.symm_mem.one_shot_all_reduce_out if self.oneshot else torch.ops.symm_mem.two_shot_all_reduce_out
            op(view, "sum", self.name, s)
        return s

    def call(self, x, res_in, w, res_out, norm_out):
        s = self._reduce(x)
        res_out.copy_(res_in)
        norm_out.copy_(self.fn(s, res_out, w, self.a.eps))

    def step(self, x, res, w, norm, k):
        self.fn(self._reduce(x), res, w, self.a.eps)


class NcclTorchPeer(Peer):
    """dist.all_reduce in place on `slots` (the all-reduce's input lives where NCCL can use it, as an
    engine's GEMM output would); symm: the slots come from a MemPool of the process group's NCCL
    allocator, registered as symmetric windows. In-place all-reduce feeds a call's sum back into a
    later call's input, so values grow over the replays; that changes neither NCCL's nor the norm's work."""

    def __init__(self, a, rank, n, dev, max_tokens, symm):
        self.a, self.symm, dtype = a, symm, P.dtype_of(a.dtype)
        device = torch.device("cuda", dev)
        nslots = max(1, a.calls)
        self.kernels, self.pool = [], None
        self.note = "dist.all_reduce (in place) + torch.compile'd add+RMSNorm"
        if symm:
            backend = dist.group.WORLD._get_backend(device)
            self.pool = torch.cuda.MemPool(backend.mem_allocator)
            with torch.cuda.use_mem_pool(self.pool):
                self.slots = [torch.empty(max_tokens, a.hidden, dtype=dtype, device=device) for _ in range(nslots)]
            try:
                backend.register_mem_pool(self.pool, symm=True)
                self.note += "; tensors of NCCL's allocator (ncclMemAlloc) registered as symmetric windows"
            except TypeError:
                backend.register_mem_pool(self.pool)
                self.note += "; this torch registers the pool as buffers, not symmetric windows"
        else:
            self.slots = [torch.empty(max_tokens, a.hidden, dtype=dtype, device=device) for _ in range(nslots)]
        self.fn = P.compiled_add_rmsnorm()

    def call(self, x, res_in, w, res_out, norm_out):
        s = self.slots[0][:x.shape[0]]
        s.copy_(x)
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            dist.all_reduce(s)
            torch.cuda.synchronize()
        self.kernels = sorted({e.name for e in prof.events() if "nccl" in e.name.lower()})
        res_out.copy_(res_in)
        norm_out.copy_(self.fn(s, res_out, w, self.a.eps))

    def load(self, xs):
        for k, slot in enumerate(self.slots):
            slot[:xs[0].shape[0]].copy_(xs[k % len(xs)])

    def step(self, x, res, w, norm, k):
        s = self.slots[k % len(self.slots)][:x.shape[0]]
        dist.all_reduce(s)
        self.fn(s, res, w, self.a.eps)

    def extra(self):
        out = {"nccl_kernels": self.kernels}
        if self.kernels:
            out["symmetric"] = any("ncclSym" in k for k in self.kernels)
        return out


def make_peer(name, a, rank, n, dev, max_tokens):
    if name == "arfuse":
        return ArfusePeer(a, rank, n, dev, max_tokens)
    if name.startswith("flashinfer-"):
        return FlashInferPeer(a, rank, n, dev, max_tokens, name.endswith("oneshot"))
    if name.startswith("torch-symm-"):
        return TorchSymmPeer(a, rank, n, dev, max_tokens, name.endswith("oneshot"))
    return NcclTorchPeer(a, rank, n, dev, max_tokens, name == "nccl-symm-torch")


def agree(ctrl, mine, n):
    """Every rank's word (None for fine); the first rank's complaint, or "" when all are fine."""
    words = [None] * n
    dist.all_gather_object(words, mine, group=ctrl)
    for r, w in enumerate(words):
        if w:
            return f"rank {r}: {w}"
    return ""


def multi_check(peer, a, rank, n, t, dtype, dev):
    xs = [P.randn_like_seeded((t, a.hidden), a.seed * 1000 + 31 * t + r, dtype, dev) for r in range(n)]
    res = P.randn_like_seeded((t, a.hidden), a.seed * 1000 + 31 * t + 997, dtype, dev)
    w = P.randn_like_seeded((a.hidden,), a.seed * 1000 + 31 * t + 998, dtype, dev, 0.5, 1.5)
    res_out, norm_out = torch.full_like(res, float("nan")), torch.full_like(res, float("nan"))  # poisoned
    peer.call(xs[rank], res, w, res_out, norm_out)
    torch.cuda.synchronize()
    total = sum(x.double() for x in xs)
    ref_res, ref_norm = P.reference(total, res, w, a.eps, dtype)
    e_res, e_norm = P.rel_err(res_out, ref_res), P.rel_err(norm_out, ref_norm)
    tol = P.TOLERANCE[a.dtype]
    bad = "" if e_res <= tol and e_norm <= tol else f"check failed against fp64: err_residual={e_res:.3e} " \
                                                     f"err_norm={e_norm:.3e} (tol {tol})"
    return bad, P.output_hash(res_out, norm_out)


def worker(a):
    rank, n = a.rank, a.nprocs
    ngpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    distinct = ngpu >= n
    dev = rank if distinct else 0
    result = {"rows": [], "timing": ""}
    try:
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if distinct else "gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=rank,
                                world_size=n)
        ctrl = dist.new_group(backend="gloo")
        dtype, device = P.dtype_of(a.dtype), torch.device("cuda", dev)
        es = torch.tensor([], dtype=dtype).element_size()
        l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0))
        max_tokens = max(a.tokens)
        for name in a.peers:
            if not distinct and name != "arfuse":
                for t in a.tokens:
                    result["rows"].append(P.make_row(name, t, t * a.hidden * es, error=(
                        f"cannot run here: needs {n} GPUs, one per rank ({ngpu} visible)")))
                continue
            peer, err = None, None
            try:
                peer = make_peer(name, a, rank, n, dev, max_tokens)
            except Exception as e:
                err = P.why(e)
            err = agree(ctrl, err, n)
            for t in a.tokens:
                nbytes = t * a.hidden * es
                sets = P.rotation_sets(2 * nbytes, l2, a.calls)  # x and norm_out rotate; the residual is chained
                row = dict(sets=sets, footprint=sets * 2 * nbytes + nbytes, l2_bytes=l2, proxy=not distinct)
                if err:
                    result["rows"].append(P.make_row(name, t, nbytes, error=f"cannot run here: {err}", **row))
                    continue
                na = peer.unsupported(t)
                if na:
                    result["rows"].append(P.make_row(name, t, nbytes, error=na, **row))
                    continue
                # Every rank makes the same gloo calls whatever happened to it, so none waits alone.
                bad, h, extra, ferr, ms = "", None, {}, None, []
                try:
                    bad, h = multi_check(peer, a, rank, n, t, dtype, device)
                    extra = peer.extra()
                except Exception as e:
                    ferr = P.why(e)
                words = [None] * n
                dist.all_gather_object(words, (ferr, bad, h), group=ctrl)
                fatal = next((f"rank {r}: {w[0]}" for r, w in enumerate(words) if w[0]), "")
                wrong = next((f"rank {r}: {w[1]}" for r, w in enumerate(words) if w[1]), "")
                extra["bitwise_identical_across_ranks"] = len({w[2] for w in words}) == 1
                terr = None
                if not fatal:
                    try:
                        xs = [P.randn_like_seeded((t, a.hidden), a.seed + 100 * k + rank, dtype, device)
                              for k in range(sets)]
                        norms = [torch.empty_like(xs[0]) for _ in range(sets)]
                        res = P.randn_like_seeded((t, a.hidden), a.seed + 99, dtype, device)
                        w = P.randn_like_seeded((a.hidden,), a.seed + 98, dtype, device, 0.5, 1.5)
                        if hasattr(peer, "load"):
                            peer.load(xs)
                        timer = P.GraphTimer(lambda i: peer.step(xs[i % sets], res, w, norms[i % sets], i), a.calls)
                        result["timing"] = timer.method
                        ms = timer.run(a.iters, a.warmup)
                    except Exception as e:
                        terr, ms = P.why(e), []
                every = [None] * n
                dist.all_gather_object(every, (terr, ms), group=ctrl)
                fatal = fatal or next((f"rank {r}: {e}" for r, (e, _) in enumerate(every) if e), "")
                timing = P.summarize([m for _, m in every], a.calls) if not fatal else None
                result["rows"].append(P.make_row(name, t, nbytes, timing=timing, error=fatal, wrong=1 if wrong else 0,
                                                 note=(wrong + "; " if wrong else "") + peer.note, extra=extra, **row))
            if peer:
                try:
                    peer.close()
                except Exception:
                    pass
        dist.destroy_process_group()
    except Exception:
        result["fatal"] = traceback.format_exc()[-2000:]
    if rank == 0:
        with open(a.result, "w") as f:
            import json
            json.dump(result, f)
    return 1 if result.get("fatal") else 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(a, env, argv):
    n, tmp = a.nprocs, tempfile.mkdtemp(prefix="arfuse-peers-")
    port, result = free_port(), os.path.join(tmp, "rank0.json")
    procs, logs = [], []
    for r in range(n):
        logs.append(os.path.join(tmp, f"rank{r}.log"))
        with open(logs[-1], "w") as log:
            procs.append(subprocess.Popen([sys.executable, os.path.join(P.ROOT, "bench", "peers.py"), *argv, "--rank",
                                           str(r), "--port", str(port), "--result", result],
                                          stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    deadline = time.time() + a.timeout
    for p in procs:
        try:
            p.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    status = [p.returncode for p in procs]
    try:
        import json
        with open(result) as f:
            res = json.load(f)
    except (OSError, ValueError):
        last = open(logs[0]).read().strip().splitlines()[-1:] if os.path.exists(logs[0]) else []
        res = {"rows": [], "fatal": f"rank 0 left no result (exit {status[0]}); last log line: {last}"}
    if res.get("fatal"):
        env["run_failed"] = True
        print(f"# peers: a rank failed; logs in {tmp}\n{res['fatal']}")
        if not res["rows"]:
            res["rows"] = [P.make_row(p, t, 0, error="the run failed: " + res["fatal"].strip().splitlines()[-1])
                           for p in a.peers for t in a.tokens]
    env["timing"] = res.get("timing", "")
    rows = P.best_peer_ratios(res["rows"])
    print(f"# peers, {n} processes, hidden {a.hidden}, {a.dtype}; vs_best_peer for arfuse")
    print(f"{'tokens':>8} {'peer':>20} {'time_us':>10} {'vs_best':>8} {'#wrong':>6}")
    for r in sorted(rows, key=lambda r: (r["tokens"], r["algo"])):
        print(f"{r['tokens']:>8} {r['algo']:>20} {r.get('median_us', float('nan')):>10.2f} "
              f"{r.get('ratio', float('nan')):>8.3f} {r['wrong']:>6}  {r.get('error', '')}")
    if all(s == 0 for s in status):
        for f in logs + [result]:
            os.path.exists(f) and os.remove(f)
        os.rmdir(tmp)
    else:
        print(f"# exit statuses {status}; logs in {tmp}")
    return rows
