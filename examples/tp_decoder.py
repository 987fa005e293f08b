#!/usr/bin/env python3
"""A tensor-parallel Llama-style decoder stack, run twice: with plain torch.distributed all-reduce +
residual add + RMSNorm, then with arfuse's fused op, asserting that the hidden states agree within
bf16 tolerance. This is how an inference engine adopts arfuse: one communicator per process from its
torch.distributed group, and one call where the engine had three.

The model: random weights (seeded, equal on every rank), LAYERS x [RMSNorm -> causal self-attention
(heads split over ranks; no rotary embedding, no KV cache) -> RMSNorm -> SwiGLU MLP (intermediate
split over ranks)]. Each attention output and MLP down projection is row-parallel, so each yields a
partial sum that needs an all-reduce, a residual add and the next RMSNorm: exactly
arfuse.torch.all_reduce_add_rmsnorm(comm, partial, residual, next_norm_weight, eps).

Launch: by itself (--nprocs N processes through torch.multiprocessing, spawn), or under torchrun
(`torchrun --nproc-per-node N examples/tp_decoder.py`). GPUs: one per rank when there are enough
(backend NCCL), otherwise every rank on GPU 0 (backend gloo, since NCCL refuses two ranks on one GPU;
arfuse shares the GPU's memory between the processes through CUDA IPC; the processes time-slice the
GPU, hence the generous timeouts). Without a GPU (--device cpu) the arfuse run cannot get a
communicator and uses arfuse.torch's torch.distributed fallback, and says so.

Exit status: 0 when the runs agree, 1 when they do not or a rank failed, 2 for bad arguments.
"""
import argparse
import datetime
import hashlib
import math
import os
import queue
import sys
import tempfile
import time
import traceback

EPS = 1e-5


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Tensor-parallel Llama-style decoder: plain torch all-reduce + add + RMSNorm vs arfuse's fused "
                    "op, hidden states compared within bf16 tolerance.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--nprocs", type=int, default=2, help="tensor-parallel ranks (processes) to launch")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                   help="auto: cuda when torch sees a GPU, else cpu (the arfuse run then uses the torch fallback)")
    p.add_argument("--gpus", choices=["auto", "distinct", "shared"], default="auto",
                   help="distinct: rank r on GPU r; shared: every rank on GPU 0; auto: distinct when there are "
                        "enough GPUs")
    p.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto",
                   help="torch.distributed backend; auto: nccl for distinct GPUs, gloo otherwise")
    p.add_argument("--layers", type=int, default=4, help="decoder layers")
    p.add_argument("--hidden", type=int, default=1024, help="model width (a multiple of 8 and of --heads)")
    p.add_argument("--heads", type=int, default=16, help="attention heads (divisible by --nprocs)")
    p.add_argument("--ffn", type=int, default=2048, help="MLP intermediate size (divisible by --nprocs)")
    p.add_argument("--tokens", type=int, default=16, help="sequence length of the one prompt")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16", help="model dtype")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and prompt")
    p.add_argument("--graph", action="store_true",
                   help="also capture the arfuse forward in a CUDA graph and replay it twice: the replays must "
                        "give the same bits and agree with the eager run")
    p.add_argument("--require-arfuse", action="store_true",
                   help="fail unless arfuse itself (not the torch fallback) served every fused call")
    p.add_argument("--arfuse-timeout-ms", type=int, default=60000,
                   help="arfuse's device-side wait bound (generous: ranks sharing a GPU time-slice)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before every rank is stopped")
    p.add_argument("--rtol", type=float, default=None, help="norm-wise relative tolerance ||a-b||/||b||; by default 2e-2 for bf16, "
                                                             "4e-3 for fp16, 1e-4 for fp32")
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance; by default --rtol (4 x for the "
                                                             "residual stream)")
    args = p.parse_args(argv)
    problems = []
    if args.nprocs < 1:
        problems.append("--nprocs must be >= 1")
    for name in ("hidden", "heads", "ffn"):
        if getattr(args, name) % max(args.nprocs, 1):
            problems.append(f"--{name}={getattr(args, name)} is not divisible by --nprocs={args.nprocs}")
    if args.hidden % args.heads:
        problems.append(f"--hidden={args.hidden} is not divisible by --heads={args.heads}")
    if args.hidden % 8:
        problems.append(f"--hidden={args.hidden} must be a multiple of 8 (arfuse's vector width)")
    if args.tokens < 1 or args.layers < 1:
        problems.append("--tokens and --layers must be >= 1")
    if problems:
        p.error("; ".join(problems))
    tol = {"bf16": 2e-2, "fp16": 4e-3, "fp32": 1e-4}[args.dtype]
    args.rtol = tol if args.rtol is None else args.rtol
    args.atol = args.rtol if args.atol is None else args.atol
    return args


# ---- the model ---------------------------------------------------------------------------------------------
class Shard:
    """This rank's slice of the model: column-parallel q/k/v and gate/up, row-parallel o and down."""

    def __init__(self, args, rank, nranks, device, dtype):
        import torch

        gen = torch.Generator().manual_seed(args.seed)  # every rank draws the same full weights

        def full(*shape):
            return torch.randn(*shape, generator=gen) / math.sqrt(shape[-1])

        def norm_weight():
            return 1.0 + 0.1 * torch.randn(args.hidden, generator=gen)

        h, f, n = args.hidden, args.ffn, nranks
        hs, fs = h // n, f // n
        cols, ffn_cols = slice(rank * hs, (rank + 1) * hs), slice(rank * fs, (rank + 1) * fs)

        def put(t):
            return t.to(dtype).contiguous().to(device)

        self.layers = []
        for _ in range(args.layers):
            q, k, v, o = full(h, h), full(h, h), full(h, h), full(h, h)
            gate, up, down = full(f, h), full(f, h), full(h, f)
            self.layers.append({
                "attn_norm": put(norm_weight()), "mlp_norm": put(norm_weight()),
                "qkv": put(torch.cat([q[cols], k[cols], v[cols]])),  # [3 h/n, h]
                "o": put(o[:, cols]),                                 # [h, h/n]
                "gate_up": put(torch.cat([gate[ffn_cols], up[ffn_cols]])),  # [2 f/n, h]
                "down": put(down[:, ffn_cols]),                       # [h, f/n]
            })
        self.final_norm = put(norm_weight())
        self.embeddings = put(torch.randn(args.tokens, h, generator=gen))  # the prompt, after the embedding
        self.heads = args.heads // n
        self.head_dim = h // args.heads

    def attention(self, i, x):
        """Partial (pre-all-reduce) output of layer i's attention: [tokens, hidden]."""
        import torch
        import torch.nn.functional as F

        layer = self.layers[i]
        t = x.shape[0]
        q, k, v = (x @ layer["qkv"].t()).view(t, 3, self.heads, self.head_dim).permute(1, 2, 0, 3)  # [heads, t, d]
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [heads, t, d]
        return torch.matmul(a.transpose(0, 1).reshape(t, self.heads * self.head_dim), layer["o"].t())

    def mlp(self, i, x):
        import torch.nn.functional as F

        layer = self.layers[i]
        gate, up = (x @ layer["gate_up"].t()).chunk(2, dim=-1)
        return (F.silu(gate) * up) @ layer["down"].t()

    def norm_after(self, i, part):
        """The RMSNorm weight that follows layer i's attention ("mlp") or MLP ("next")."""
        if part == "mlp":
            return self.layers[i]["mlp_norm"]
        return self.layers[i + 1]["attn_norm"] if i + 1 < len(self.layers) else self.final_norm


def rmsnorm(x, weight):
    import torch

    r = x.float()
    return (r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + EPS) * weight.float()).to(x.dtype)


def forward(model, reduce_add_norm):
    """The decoder stack; reduce_add_norm(partial, residual, weight) -> (normed, new residual)."""
    residual = model.embeddings.clone()  # this forward's residual stream (updated in place by arfuse)
    h = rmsnorm(residual, model.layers[0]["attn_norm"])  # the first norm has nothing to reduce
    for i in range(len(model.layers)):
        h, residual = reduce_add_norm(model.attention(i, h), residual, model.norm_after(i, "mlp"))
        h, residual = reduce_add_norm(model.mlp(i, h), residual, model.norm_after(i, "next"))
    return h, residual


def torch_reduce_add_norm(backend):
    """What an engine does without arfuse: all-reduce in the model dtype, add, RMSNorm."""
    import torch.distributed as dist

    def step(part, residual, weight):
        if backend == "gloo" and part.is_cuda:  # gloo reduces through host memory anyway: do it explicitly
            host = part.cpu()
            dist.all_reduce(host)
            part = host.to(part.device)
        else:
            dist.all_reduce(part)
        residual = residual + part
        return rmsnorm(residual, weight), residual

    return step


def arfuse_reduce_add_norm(comm):
    import arfuse.torch as at

    def step(part, residual, weight):
        # residual_out=residual: in place, as an engine keeps one residual buffer
        return at.all_reduce_add_rmsnorm(comm, part, residual, weight, EPS, residual_out=residual)

    return step


# ---- one rank ------------------------------------------------------------------------------------------------
def digest(t):
    import torch

    return hashlib.sha256(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()[:16]


def run_rank(args, rank, nranks, device, backend, say):
    import torch
    import torch.distributed as dist

    import arfuse.torch as at

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    model = Shard(args, rank, nranks, device, dtype)

    with torch.no_grad():
        base_h, base_res = forward(model, torch_reduce_add_norm(backend))

        fields = dict(max_tokens=args.tokens, max_hidden=args.hidden, dtypes=[dtype], timeout_ms=args.arfuse_timeout_ms)
        if device.type != "cuda":
            if args.require_arfuse:
                raise SystemExit("tp_decoder: --require-arfuse needs --device cuda: arfuse runs on CUDA tensors")
            comm = None  # arfuse.torch then computes every call with torch.distributed
            if rank == 0:
                say("no arfuse communicator on CPU tensors: the arfuse run uses arfuse.torch's torch fallback")
        elif args.require_arfuse:
            comm = at.from_process_group(device=device.index, **fields)
        else:
            comm = at.try_from_process_group(device=device.index, **fields)
        try:
            if comm is not None and rank == 0:
                plan = comm.query_plan("fused", args.tokens, args.hidden, args.dtype)
                say(f"arfuse communicator: {comm!r}; plan: {plan.reason}")
            before = at.counters()
            af_h, af_res = forward(model, arfuse_reduce_add_norm(comm))
            after = at.counters()
            key = "all_reduce_add_rmsnorm"
            served = {path: after.get((key, path), 0) - before.get((key, path), 0) for path in ("arfuse", "torch")}
            graph_ok = None
            if args.graph and comm is not None and device.type == "cuda":
                graph_ok = replay_matches(model, comm, af_h, af_res, args)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        finally:
            if comm is not None:
                comm.destroy()

    diff = (af_h.float() - base_h.float()).abs()
    rel = diff.max().item() / max(base_h.float().abs().max().item(), 1e-30)
    cos = torch.nn.functional.cosine_similarity(af_h.float().flatten(), base_h.float().flatten(), dim=0).item()
    # Norm-wise relative error (as arfuse's own harness measures it): elementwise allclose would
    # fail on single-ulp bf16 roundings that several layers carry forward at large magnitudes.
    close = normwise_error(af_h, base_h) <= args.rtol and normwise_error(af_res, base_res) <= args.rtol
    mine = {"rank": rank, "served": served, "close": close, "max_abs": diff.max().item(), "max_rel": rel,
            "cos": cos, "digest": (digest(af_h), digest(af_res)), "graph": graph_ok}
    everyone = [None] * nranks
    dist.all_gather_object(everyone, mine)  # every rank returns every rank's summary
    return everyone


def normwise_error(got, want):
    """||got - want|| / ||want|| in fp64."""
    g, w = got.double(), want.double()
    return ((g - w).norm() / w.norm().clamp_min(1e-300)).item()


def replay_matches(model, comm, want_h, want_res, args):
    """Captures the arfuse forward in a CUDA graph (after an eager warm-up on the capture stream) and
    replays it twice. The replays must give the same bits as each other and agree with the eager
    arfuse run within tolerance (cuBLAS may pick other kernels under capture, so not bitwise).
    Returns (ok, largest difference from eager)."""
    import torch

    step = arfuse_reduce_add_norm(comm)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        forward(model, step)  # warm-up: lazy initialisation happens outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_h, out_res = forward(model, step)
    replays = []
    for _ in range(2):
        out_h.zero_()
        out_res.zero_()
        graph.replay()
        torch.cuda.synchronize()
        replays.append((out_h.clone(), out_res.clone()))
    same = all(torch.equal(a, b) for a, b in zip(replays[0], replays[1]))
    h, res = replays[0]
    close = normwise_error(h, want_h) <= args.rtol and normwise_error(res, want_res) <= args.rtol
    return same and close, (h.float() - want_h.float()).abs().max().item()


def plan_devices(args, nranks):
    """(device kind, per-rank GPU or None, backend)."""
    import torch

    kind = args.device
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda" and not torch.cuda.is_available():
        raise SystemExit("tp_decoder: --device cuda but torch sees no GPU (torch.cuda.is_available() is False)")
    gpus = [None] * nranks
    if kind == "cuda":
        count = torch.cuda.device_count()
        mode = args.gpus if args.gpus != "auto" else ("distinct" if count >= nranks else "shared")
        if mode == "distinct" and count < nranks:
            raise SystemExit(f"tp_decoder: --gpus distinct needs {nranks} GPUs, torch sees {count}")
        gpus = list(range(nranks)) if mode == "distinct" else [0] * nranks
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if kind == "cuda" and len(set(gpus)) == nranks and nranks > 1 else "gloo"
    if backend == "nccl" and (kind != "cuda" or len(set(gpus)) != nranks):
        raise SystemExit("tp_decoder: --backend nccl needs one GPU per rank (NCCL refuses two ranks on one GPU); "
                         "use --backend gloo")
    return kind, gpus, backend


def worker(rank, nranks, args, init_method, results):
    """One rank: set up torch.distributed, run both forwards, report a dict (or a traceback)."""
    def say(msg):
        print(f"[rank {rank}] {msg}", flush=True)

    try:
        import torch
        import torch.distributed as dist

        kind, gpus, backend = plan_devices(args, nranks)
        if kind == "cuda":
            gpu = gpus[int(os.environ.get("LOCAL_RANK", rank))]  # torchrun names the local rank
            torch.cuda.set_device(gpu)
            device = torch.device("cuda", gpu)
        else:
            device = torch.device("cpu")
        if backend == "gloo" and init_method.startswith("file://"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # launched here: one host, loopback
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=nranks,
                                timeout=datetime.timedelta(seconds=args.timeout))
        try:
            if rank == 0:
                say(f"{nranks} ranks, {kind}{' GPUs ' + str(gpus) if kind == 'cuda' else ''}, backend {backend}, "
                    f"{args.layers} layers, hidden {args.hidden}, heads {args.heads}, ffn {args.ffn}, "
                    f"tokens {args.tokens}, {args.dtype}")
            result = run_rank(args, rank, nranks, device, backend, say)
        finally:
            dist.destroy_process_group()
        results.put(("ok", rank, result))
    except BaseException:  # noqa: B902 - report, then fail this process
        results.put(("error", rank, traceback.format_exc()))
        raise SystemExit(1)


def report(args, outcomes, show=True):
    """Prints the summary (when show); returns the exit status. outcomes: every rank's summary."""
    out = print if show else (lambda *a, **k: None)
    served = {p: sum(o["served"][p] for o in outcomes) // len(outcomes) for p in ("arfuse", "torch")}
    path = "arfuse" if served["arfuse"] and not served["torch"] else (
        "torch fallback" if served["torch"] and not served["arfuse"] else "mixed")
    out(f"arfuse run: {path} ({served['arfuse']} fused calls by arfuse, {served['torch']} by the torch fallback "
          f"per rank)")
    out(f"hidden states vs the torch run: max |diff| {max(o['max_abs'] for o in outcomes):.3g}, max relative "
          f"{max(o['max_rel'] for o in outcomes):.3g}, cosine {min(o['cos'] for o in outcomes):.6f} "
          f"(rtol {args.rtol:g}, atol {args.atol:g})")
    failures = []
    if not all(o["close"] for o in outcomes):
        failures.append("the arfuse run's hidden states differ from the torch run's beyond tolerance")
    if any(o["digest"] != outcomes[0]["digest"] for o in outcomes):
        failures.append("the arfuse run's outputs differ between ranks")
    if args.require_arfuse and path != "arfuse":
        failures.append(f"--require-arfuse: {served['torch']} fused calls per rank went to the torch fallback")
    graph = [o["graph"] for o in outcomes]
    if args.graph:
        if all(g is None for g in graph):
            out("CUDA graph: not run (no arfuse communicator or not on a GPU)")
        elif all(g is not None and g[0] for g in graph):
            out(f"CUDA graph: captured the arfuse forward; 2 replays identical to each other, max |diff| from "
                f"eager {max(g[1] for g in graph):.3g}")
        else:
            failures.append("CUDA graph replays differ from each other or from the eager arfuse run beyond "
                            "tolerance (max |diff| " + ", ".join(f"{g[1]:.3g}" for g in graph if g) + ")")
    for f in failures:
        out(f"FAIL: {f}")
    if not failures:
        out("PASS: hidden states agree within tolerance and are identical on every rank")
    return 1 if failures else 0


def launch(args):
    """Spawns args.nprocs ranks and waits for them, never longer than args.timeout."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    store = os.path.join(tempfile.mkdtemp(prefix="tp_decoder-"), "store")
    procs = [ctx.Process(target=worker, args=(r, args.nprocs, args, f"file://{store}", results), daemon=True)
             for r in range(args.nprocs)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + args.timeout
    outcomes, errors = {}, {}
    try:
        while len(outcomes) + len(errors) < args.nprocs and time.monotonic() < deadline:
            try:
                status, rank, value = results.get(timeout=1.0)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in errors]
                for r in dead:
                    time.sleep(0.5)
                    if results.empty():
                        errors[r] = f"exited with code {procs[r].exitcode} without a report"
                if errors:
                    break
                continue
            if status == "ok":
                outcomes[rank] = value
            else:
                errors[rank] = value
                break  # the others may be waiting for this rank
    finally:
        for p in procs:
            p.join(timeout=max(0.0, min(10.0, deadline - time.monotonic())) if not errors else 1.0)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    if errors or len(outcomes) < args.nprocs:
        for r, text in sorted(errors.items()):
            print(f"FAIL: rank {r}:\n{text}", file=sys.stderr)
        silent = [r for r in range(args.nprocs) if r not in outcomes and r not in errors]
        if silent:
            print(f"FAIL: ranks {silent} did not finish within {args.timeout:g} s and were stopped "
                  f"(raise --timeout, or see the ranks' output above)", file=sys.stderr)
        return 1
    return report(args, outcomes[0])


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch  # noqa: F401 - only checks that torch is there
    except ImportError:
        print("tp_decoder: this example needs PyTorch (pip install torch)", file=sys.stderr)
        return 2
    if "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun: this process is one rank
        args.nprocs = int(os.environ["WORLD_SIZE"])
        results = queue.Queue()
        worker(int(os.environ["RANK"]), args.nprocs, args, "env://", results)
        status, rank, value = results.get()
        return report(args, value, show=rank == 0)
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
