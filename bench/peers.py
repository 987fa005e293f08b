#!/usr/bin/env python3
"""arfuse against what users can already switch on, timed the way `arfuse bench` times itself.

    # all-reduce + residual add + RMSNorm, one process per GPU (N GPUs):
    python3 bench/peers.py --nprocs N --tokens 1,16,256 -J out.json
    # single GPU, add + RMSNorm (arfuseAddRmsNorm's peers):
    python3 bench/peers.py --single --tokens 1,16,256,1024,4096 -J out.json

Multi-GPU peers (--nprocs N, one process per GPU, torch.distributed over NCCL on 127.0.0.1):
  arfuse              arfuse.torch.all_reduce_add_rmsnorm (the torch op; one communicator per process
                      from the process group)
  flashinfer-oneshot  flashinfer.comm.trtllm_allreduce_fusion, residual + RMSNorm pattern, one-shot,
  flashinfer-twoshot  two-shot, PDL on, fp32 accumulation (what SGLang and vLLM fuse with)
  torch-symm-oneshot  torch symmetric memory one_shot_all_reduce_copy_out + torch.compile'd add+RMSNorm
  torch-symm-twoshot  copy into the symmetric buffer + two_shot_all_reduce_out + the compiled norm, as
                      torch's own lowering does (multicast stays off: TORCH_SYMM_MEM_DISABLE_MULTICAST=1)
  nccl-symm-torch     dist.all_reduce on tensors of a MemPool of NCCL's allocator registered as symmetric
                      windows, + the compiled norm; the JSON names the NCCL kernels the profiler saw
  nccl-torch          the same on ordinary tensors (NCCL's classic kernels)
Single-GPU peers (--single): arfuse (arfuseAddRmsNorm via arfuse.torch.add_rmsnorm), torch-compile (the
same math under torch.compile), flashinfer (flashinfer.norm.fused_add_rmsnorm), copy (a device copy of
the same bytes: the bandwidth floor).

Method, as `arfuse bench`: every result is checked against an fp64 reference on fresh random inputs
(never zeros) with the outputs poisoned first; then `--calls` calls are captured in one CUDA graph,
events inside the graph after the first call (it absorbs the skew between ranks), replayed -w + -n
times; per replay the slowest rank counts, the median is reported. Call i works on input set i % sets,
with enough sets to exceed twice the L2 where the graph's calls allow (bench's rotation rule). A peer
that cannot run (a package that is not there, too few GPUs, an architecture it refuses) gets a row
that says why. JSON: arfuse-bench/4 (tools/arfuse/bench_json.h), "suite": "peers"; peers have role
"peer", arfuse role "arfuse"; scripts/perf_table.py puts them with `arfuse bench` runs of the same
--machine into one table with a "vs best peer" column.
"""
import argparse
import datetime
import hashlib
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = "arfuse-bench/4"
MULTI_PEERS = ["arfuse", "flashinfer-oneshot", "flashinfer-twoshot", "torch-symm-oneshot", "torch-symm-twoshot",
               "nccl-symm-torch", "nccl-torch"]
SINGLE_PEERS = ["arfuse", "torch-compile", "flashinfer", "copy"]
TOLERANCE = {"bf16": 1e-2, "fp16": 2e-3, "fp32": 1e-5}  # relative L2 error, as harness/numeric.h
L2_FACTOR, MAX_ROTATION_BYTES = 2, 4 << 30


# ---- pure helpers (CPU-tested) ---------------------------------------------------------------------------
def rotation_sets(set_bytes, l2_bytes, calls):
    """Input sets a graph of `calls` calls rotates through: tools/harness/rotation.h's rule."""
    if set_bytes <= 0 or calls < 1:
        return 1
    want = -(-L2_FACTOR * l2_bytes // set_bytes) if l2_bytes else 8
    want = max(1, min(want, calls))
    fit = MAX_ROTATION_BYTES // set_bytes
    return int(min(want, fit) if fit else 1)


def summarize(per_rank_ms, calls):
    """Per replay the slowest rank; median/min/max per call in µs over the replays (calls - 1 timed)."""
    lengths = {len(v) for v in per_rank_ms}
    if len(lengths) != 1 or not per_rank_ms[0]:
        raise ValueError(f"ranks timed different numbers of replays: {sorted(lengths)}")
    worst = sorted(max(col) for col in zip(*per_rank_ms))
    scale = 1000.0 / (calls - 1)
    return {"median_us": worst[len(worst) // 2] * scale, "min_us": worst[0] * scale, "max_us": worst[-1] * scale}


def parse_tokens(text):
    try:
        toks = [int(t) for t in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--tokens {text}: a comma list of token counts, e.g. 1,16,256")
    if not toks or min(toks) < 1:
        raise argparse.ArgumentTypeError(f"--tokens {text}: token counts are >= 1")
    return toks


def parse_peers(text, known):
    peers = [p for p in text.split(",") if p]
    bad = [p for p in peers if p not in known]
    if bad or not peers:
        raise argparse.ArgumentTypeError(f"--peers {text}: use a comma list of {', '.join(known)}")
    return peers


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--nprocs", type=int, default=0, help="ranks, one process per GPU (>= 2)")
    mode.add_argument("--single", action="store_true", help="single-GPU add+RMSNorm peers")
    p.add_argument("--tokens", type=parse_tokens, default=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048])
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("-d", "--dtype", default="bf16", choices=["bf16", "bfloat16", "fp16", "half", "fp32", "float"])
    p.add_argument("--peers", default=None, help="comma list (default: every peer of the mode)")
    p.add_argument("-n", "--iters", type=int, default=50, help="timed graph replays")
    p.add_argument("-w", "--warmup", type=int, default=10, help="warm-up graph replays")
    p.add_argument("--calls", type=int, default=20, help="calls captured per graph (>= 2)")
    p.add_argument("--eps", type=float, default=1e-6)
    p.add_argument("--seed", type=int, default=77)
    p.add_argument("--machine", default="", help="name of this machine in the JSON (perf_table.py groups by it)")
    p.add_argument("--timeout", type=int, default=600, help="bound on the whole multi-process run, seconds")
    p.add_argument("-J", "--json", default="", help="write arfuse-bench/4 JSON here")
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)  # internal: a worker
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--result", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.dtype = {"bfloat16": "bf16", "half": "fp16", "float": "fp32"}.get(a.dtype, a.dtype)
    if not a.single and a.nprocs < 2:
        p.error("give --nprocs N (N >= 2, one process per GPU) or --single")
    if a.hidden < 8 or a.hidden % 8:
        p.error(f"--hidden {a.hidden}: a positive multiple of 8")
    if a.calls < 2 or a.iters < 1 or a.warmup < 0:
        p.error("--calls >= 2, -n >= 1, -w >= 0")
    known = SINGLE_PEERS if a.single else MULTI_PEERS
    try:
        a.peers = parse_peers(a.peers, known) if a.peers else list(known)
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    return a


def make_row(name, tokens, nbytes, *, role=None, timing=None, error="", wrong=0, note="", proxy=False, sets=0,
             footprint=0, l2_bytes=0, extra=None):
    """One results row of arfuse-bench/4."""
    r = {"tokens": tokens, "bytes": nbytes, "algo": name, "role": role or ("arfuse" if name == "arfuse" else "peer"),
         "epilogue": "none"}
    if timing and not error:
        r.update({k: round(v, 4) for k, v in timing.items()})
        r["algbw_GBps"] = round(nbytes / (timing["median_us"] * 1e3), 3)
    elif error:
        r["error"] = error
    r["proxy"] = proxy
    if sets:
        r["rotation"] = {"sets": sets, "bytes": footprint,
                         "exceeds_2x_l2": bool(l2_bytes and footprint >= L2_FACTOR * l2_bytes)}
    if note:
        r["note"] = note
    if extra:
        r.update(extra)
    r["wrong"] = wrong
    return r


def best_peer_ratios(rows):
    """Adds "ratio" / "ratio_to" to each arfuse row: its median over the fastest correct peer's at that size."""
    for r in rows:
        if r["role"] != "arfuse" or "median_us" not in r:
            continue
        peers = [p for p in rows if p["role"] == "peer" and p["tokens"] == r["tokens"] and "median_us" in p
                 and not p.get("wrong") and not p.get("error")]
        if peers:
            best = min(peers, key=lambda p: p["median_us"])
            r["ratio"] = round(r["median_us"] / best["median_us"], 4)
            r["ratio_to"] = best["algo"]
    return rows


def document(a, env, rows):
    return {"schema": SCHEMA, "suite": "peers", "arfuse": env.get("arfuse", ""), "date": env["date"],
            "command": "python3 bench/peers.py " + " ".join(env["argv"]), "gpu": env.get("gpu", "none"),
            "driver": env.get("driver", ""), "cuda_runtime": env.get("cuda_runtime", 0), "nccl": env.get("nccl", 0),
            "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
            "torch": env.get("torch", ""), "flashinfer": env.get("flashinfer", ""),
            "op": "addrmsnorm" if a.single else "fused", "dtype": a.dtype, "hidden": a.hidden,
            "ranks": 1 if a.single else a.nprocs, "virtual_ranks": False, "mode": "in-process" if a.single else "procs",
            "procs": 0 if a.single else a.nprocs, "machine": a.machine, "l2_bytes": env.get("l2_bytes", 0),
            "proxy": False, "calls_per_graph": a.calls, "iters": a.iters, "warmup": a.warmup, "verify_pass": False,
            "epilogues": ["none"], "timing": env.get("timing", ""), "results": best_peer_ratios(rows)}


def output_hash(*tensors):
    """Of the outputs' bytes: ranks whose outputs are bitwise equal have equal hashes."""
    torch = _torch()
    h = hashlib.sha1()
    for t in tensors:
        h.update(t.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


# ---- GPU side --------------------------------------------------------------------------------------------
def _torch():
    import torch
    return torch


def dtype_of(name):
    torch = _torch()
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def randn_like_seeded(shape, seed, dtype, device, lo=-1.0, hi=1.0):
    """Uniform in [lo, hi), never zero, from a CPU generator: every process draws the same values."""
    torch = _torch()
    g = torch.Generator(device="cpu").manual_seed(seed)
    t = torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo
    t[t == 0] = 0.5 * hi
    return t.to(dtype).to(device)


def rel_err(got, ref):
    torch = _torch()
    got = got.double()
    if torch.isnan(got).any():
        return math.inf
    return float(torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-300))


def reference(xs_sum, residual, weight, eps, dtype):
    """fp64: residual_out = sum + residual; norm_out = rmsnorm(residual_out as dtype) * weight."""
    torch = _torch()
    res = xs_sum + residual.double()
    r = res.to(dtype).double()
    norm = r * torch.rsqrt((r * r).mean(-1, keepdim=True) + eps) * weight.double()
    return res, norm


def compiled_add_rmsnorm():
    """torch.compile of the header's math: residual += x (in place), norm = rmsnorm(residual) * w, fp32 inside."""
    torch = _torch()

    def add_rmsnorm_(x, residual, weight, eps: float):
        r = residual.float() + x.float()
        residual.copy_(r.to(residual.dtype))
        r = residual.float()
        return (r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(residual.dtype)

    return torch.compile(add_rmsnorm_, dynamic=True)  # one compile for every token count, as engines compile


class GraphTimer:
    """`calls` calls of step(i) in one CUDA graph; events inside it after call 1 (else around the replay)."""

    def __init__(self, step, calls):
        torch = _torch()
        self.calls = calls
        self.stream = torch.cuda.Stream()
        try:
            self.start, self.end = (torch.cuda.Event(enable_timing=True, external=True) for _ in range(2))
            self.inside = True
        except TypeError:  # a torch without external events
            self.start, self.end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            self.inside = False
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(self.stream):
            step(0)  # eager warm-up: compiles, JITs, initialises communicators outside the capture
            torch.cuda.synchronize()
            # thread_local: other threads' CUDA calls (NCCL's watchdog, say) do not break the capture
            with torch.cuda.graph(self.graph, stream=self.stream, capture_error_mode="thread_local"):
                for i in range(calls):
                    if i == 1 and self.inside:
                        self.start.record()
                    step(i)
                if self.inside:
                    self.end.record()

    def run(self, iters, warmup, barrier=None):
        torch = _torch()
        ms = []
        for it in range(warmup + iters):
            if barrier:
                barrier()
            with torch.cuda.stream(self.stream):  # replay() launches on the current stream
                if not self.inside:
                    self.start.record(self.stream)
                self.graph.replay()
                if not self.inside:
                    self.end.record(self.stream)
            torch.cuda.synchronize()
            if it >= warmup:
                ms.append(self.start.elapsed_time(self.end) * (1.0 if self.inside else (self.calls - 1) / self.calls))
        return ms

    @property
    def method(self):
        return ("CUDA-graph replays, events inside the graph after call 1" if self.inside else
                "CUDA-graph replays, events around each replay (this torch has no external events)")


def environment(a, argv):
    env = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "argv": argv}
    try:
        torch = _torch()
        env["torch"] = torch.__version__
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            env["gpu"] = f"{p.name} (sm_{p.major}{p.minor})"
            env["l2_bytes"] = int(getattr(p, "L2_cache_size", 0))
            env["cuda_runtime"] = int(float(torch.version.cuda or 0) * 1000)
        nv = torch.cuda.nccl.version() if torch.cuda.is_available() else (0, 0, 0)
        env["nccl"] = nv[0] * 10000 + nv[1] * 100 + nv[2] if isinstance(nv, tuple) else int(nv)
    except Exception as e:  # no torch / no GPU: the rows will say so
        env["torch_error"] = f"{type(e).__name__}: {e}"
    try:
        with open("/proc/driver/nvidia/version") as f:
            env["driver"] = f.read().split("Kernel Module")[1].split()[0]
    except (OSError, IndexError):
        env["driver"] = ""
    try:
        import flashinfer.version as fv  # the trimmed copy has no flashinfer/__init__ imports
        env["flashinfer"] = fv.__version__
    except Exception as e:
        env["flashinfer"] = f"not importable: {type(e).__name__}: {e}"
    try:
        import arfuse
        env["arfuse"] = arfuse.build_info() if hasattr(arfuse, "build_info") else ""
    except Exception as e:
        env["arfuse"] = f"not importable: {e}"
    return env


def setup_paths():
    """python/ on sys.path, the built library (build-gpu/ as scripts/gpu_check.sh builds it), and the
    peers' folder from scripts/fetch_peer_wheels.sh; FlashInfer's JIT cache under .carry/ (gitignored)."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    lib = os.path.join(ROOT, "build-gpu", "src", "libarfuse.so")
    if not os.environ.get("ARFUSE_LIBRARY_PATH") and os.path.exists(lib):
        os.environ["ARFUSE_LIBRARY_PATH"] = lib
    site = os.path.join(ROOT, ".carry", "peers-site")
    if os.path.isdir(site) and site not in sys.path:
        sys.path.insert(0, site)
    if os.path.isdir(os.path.join(site, "flashinfer", "data", "aot")):
        # The modules were prebuilt (fetch_peer_wheels.sh --prebuild): a module that does not load
        # should cost a row saying so, not minutes of device time in FlashInfer's JIT.
        os.environ.setdefault("FLASHINFER_DISABLE_JIT", "1")
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", os.path.join(ROOT, ".carry", "peers-jit"))
    os.environ.setdefault("FLASHINFER_USE_CUDA_NORM", "1")  # the CUDA JIT norm: the CuTe-DSL one needs cutlass-dsl
    os.environ.setdefault("FLASHINFER_DISABLE_VERSION_CHECK", "1")
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        os.environ[k] = v  # multicast stays off (a shared host's GPUs can be put out of service by it)


def why(e):
    msg = f"{type(e).__name__}: {e}".strip().splitlines()
    return (msg[0] if msg else type(e).__name__)[:300]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    setup_paths()
    sys.modules.setdefault("peers", sys.modules[__name__])  # peers_gpu imports this module by name
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        import peers_gpu  # the peers themselves (bench/peers_gpu.py): torch from here on
    except ImportError as e:
        print(f"bench/peers.py: every peer runs on PyTorch, which does not import here ({e}); run it where "
              "torch with CUDA is installed (pip install torch)", file=sys.stderr)
        return 3
    if a.rank >= 0:
        return peers_gpu.worker(a)
    env = environment(a, argv)
    rows = peers_gpu.run_single(a, env) if a.single else peers_gpu.launch(a, env, argv)
    doc = document(a, env, rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"# wrote {a.json}")
    wrong = sum(r.get("wrong", 0) for r in rows)
    return 1 if wrong or env.get("run_failed") else 0  # rows that say why a peer cannot run are results


if __name__ == "__main__":
    sys.exit(main())
