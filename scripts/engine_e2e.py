#!/usr/bin/env python3
"""End-to-end: arfuse's plugins inside real servers (`python -m sglang.launch_server`, `vllm serve`) at
TP = every GPU, on a tiny model generated here (random weights, a tokenizer trained here: nothing
from a hub). scripts/engine_e2e.sh is the entry point (it checks the GPUs first); this file does the
work and its CPU parts are tested by tests/python/test_engine_e2e.py.

For each engine it launches, one after the other, on the same model and prompts:
    off-graphs   the plugin off, CUDA graphs on (the engine as it ships)
    on-graphs    ARFUSE_SGLANG=1 / ARFUSE_VLLM=1, CUDA graphs on
    on-eager     the plugin on, CUDA graphs off (--disable-cuda-graph / --enforce-eager)
    off-eager    the plugin off, CUDA graphs off
    on-warm      on-graphs again with every cache of the first on-graphs launch kept (vLLM: its
                 compile cache, AOT artifacts included; SGLang: its own caches), a warm restart
and for each: the greedy continuation of every prompt, the decode tokens/s of one batch of all the
prompts (completion tokens / wall time, prefill included: the same for every run), the arfuse INFO /
WARN lines of the server's log and the plugin's counters (ARFUSE_PLUGIN_COUNTERS: each engine
process writes its counters there). The verdicts, in the JSON (--json) and the exit code:
    started      every server answered /health
    active       every plugin-on run printed the INFO line, no WARN, and its counters show arfuse
                 serving calls (arfuse > 0)
    warm_equal   on-warm's continuations equal on-graphs' exactly
    agreement    the fraction of prompts whose whole continuation is equal between on-graphs and
                 off-graphs (and on-eager / off-eager); at least --min-agreement (arfuse rounds the
                 residual once and sums in fp32 in rank order, so a near-tie can flip a greedy token)
"""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional

ENGINES = ("sglang", "vllm")
RUNS = ("off-graphs", "on-graphs", "on-eager", "off-eager", "on-warm")
WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
         "upsilon phi chi psi omega red green blue cyan magenta yellow black white one two three four five six "
         "seven eight nine ten").split()


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="engine_e2e", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engines", default="sglang,vllm", help="comma-separated subset of: sglang, vllm")
    p.add_argument("--tp", type=int, default=0, help="tensor-parallel size (default: every GPU)")
    p.add_argument("--out", default="out/engine_e2e", help="folder for the model, logs, caches and the JSON")
    p.add_argument("--json", default="", help="where to write the JSON (default: OUT/engine_e2e.json)")
    p.add_argument("--prompts", type=int, default=16, help="number of prompts (one batch)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="greedy tokens per prompt")
    p.add_argument("--min-agreement", type=float, default=0.75,
                   help="least fraction of prompts whose continuation is equal plugin on vs off")
    p.add_argument("--port", type=int, default=30077, help="the servers' port on 127.0.0.1")
    p.add_argument("--start-timeout", type=float, default=900.0, help="seconds to wait for /health")
    p.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated subset of: {', '.join(RUNS)}")
    p.add_argument("--hidden", type=int, default=1024, help="the generated model's hidden size")
    p.add_argument("--layers", type=int, default=4, help="the generated model's layers")
    p.add_argument("--make-model-only", action="store_true", help="write the model to OUT/model and stop")
    p.add_argument("--check-args", action="store_true", help=argparse.SUPPRESS)  # engine_e2e.sh, before the GPUs
    a = p.parse_args(argv)
    a.engines = [e.strip() for e in a.engines.split(",") if e.strip()]
    a.runs = [r.strip() for r in a.runs.split(",") if r.strip()]
    bad = [e for e in a.engines if e not in ENGINES] + [r for r in a.runs if r not in RUNS]
    if bad or not a.engines or not a.runs:
        p.error(f"unknown or empty --engines/--runs entries {bad}: engines are {', '.join(ENGINES)}, runs "
                f"{', '.join(RUNS)}")
    if "on-warm" in a.runs and "on-graphs" not in a.runs:
        p.error("--runs: on-warm restarts on-graphs's caches: list on-graphs too")
    if a.prompts < 1 or a.max_new_tokens < 1 or not 0.0 <= a.min_agreement <= 1.0:
        p.error("--prompts and --max-new-tokens must be >= 1, --min-agreement within [0, 1]")
    if a.hidden % 128 or a.layers < 2:
        p.error("--hidden must be a multiple of 128 (heads of 64 divisible by TP 1..8 x 2), --layers >= 2")
    return a


# ---- the model ------------------------------------------------------------------------------------------
def make_model(folder: Path, hidden: int = 1024, layers: int = 4, seed: int = 0) -> Dict[str, Any]:
    """A Qwen3-architecture model (SGLang fuses its layer boundaries through LayerCommunicator; vLLM's
    pass matches its all-reduce + RMSNorm) with random weights, and a byte-level BPE tokenizer trained
    here on generated text. Weights are drawn with a larger spread than training init so the logits
    have clear maxima (greedy continuations that do not hinge on one rounding). Returns its summary."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    rng = __import__("random").Random(seed)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(32)) for _ in range(2000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.save_pretrained(str(folder))
    heads = hidden // 64
    cfg = Qwen3Config(vocab_size=1024, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=heads, head_dim=64, max_position_embeddings=2048,
                      rms_norm_eps=1e-6, tie_word_embeddings=False, torch_dtype="bfloat16",
                      eos_token_id=fast.eos_token_id, bos_token_id=fast.eos_token_id)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        for name, t in model.named_parameters():
            if "norm" not in name:
                t.normal_(0.0, 0.08)
    model.to(torch.bfloat16).save_pretrained(str(folder), safe_serialization=True)
    summary = {"architecture": "Qwen3ForCausalLM", "hidden": hidden, "layers": layers, "heads": heads,
               "vocab": cfg.vocab_size, "seed": seed, "path": str(folder)}
    (folder / "arfuse_e2e_model.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def prompts(n: int, seed: int = 1) -> List[str]:
    rng = __import__("random").Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 24))) for _ in range(n)]


# ---- the servers ----------------------------------------------------------------------------------------
def server_command(engine: str, model: str, tp: int, port: int, graphs: bool) -> List[str]:
    if engine == "sglang":
        cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--tp", str(tp), "--host",
               "127.0.0.1", "--port", str(port), "--mem-fraction-static", "0.5", "--cuda-graph-max-bs", "32"]
        return cmd + ([] if graphs else ["--disable-cuda-graph"])
    cmd = ["vllm", "serve", model, "-tp", str(tp), "--host", "127.0.0.1", "--port", str(port),
           "--gpu-memory-utilization", "0.5", "--max-model-len", "1024",
           "-cc.pass_config.fuse_allreduce_rms=True"]
    return cmd + ([] if graphs else ["--enforce-eager"])


def run_env(engine: str, plugin: bool, caches: Path, counters: Path) -> Dict[str, str]:
    env = dict(os.environ)
    for k in ("ARFUSE_SGLANG", "ARFUSE_VLLM"):
        env.pop(k, None)
    if plugin:
        env["ARFUSE_SGLANG" if engine == "sglang" else "ARFUSE_VLLM"] = "1"
    env["ARFUSE_PLUGIN_COUNTERS"] = str(counters)
    # every cache of the engine under `caches`: a warm restart reuses exactly these
    env["VLLM_CACHE_ROOT"] = str(caches / "vllm")
    env["SGLANG_CACHE_DIR"] = str(caches / "sglang")
    env["TORCHINDUCTOR_CACHE_DIR"] = str(caches / "inductor")
    env["TRITON_CACHE_DIR"] = str(caches / "triton")
    return env


def _post(url: str, body: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read().decode())


def wait_healthy(port: int, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(2)
    return False


def generate(engine: str, port: int, model: str, texts: List[str], max_new_tokens: int) -> Dict[str, Any]:
    """Greedy continuations of all prompts in one request (one batch), timed."""
    t0 = time.monotonic()
    if engine == "sglang":
        r = _post(f"http://127.0.0.1:{port}/generate", {
            "text": texts, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens,
                                               "ignore_eos": True}}, timeout=600)
        outs = [o["text"] for o in r]
        tokens = sum(int(o.get("meta_info", {}).get("completion_tokens", max_new_tokens)) for o in r)
    else:
        r = _post(f"http://127.0.0.1:{port}/v1/completions", {
            "model": model, "prompt": texts, "max_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True},
            timeout=600)
        outs = [c["text"] for c in sorted(r["choices"], key=lambda c: c["index"])]
        tokens = int(r.get("usage", {}).get("completion_tokens", max_new_tokens * len(texts)))
    dt = time.monotonic() - t0
    return {"outputs": outs, "completion_tokens": tokens, "seconds": round(dt, 4),
            "tokens_per_s": round(tokens / dt, 2) if dt > 0 else None}


def stop(proc: subprocess.Popen) -> None:
    """SIGINT to the server's process group, then SIGKILL after 30 s."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


def arfuse_lines(log: str) -> Dict[str, List[str]]:
    lines = [ln.strip() for ln in log.splitlines()]
    pick = lambda tag: sorted({ln[ln.index(tag):] for ln in lines if tag in ln})  # noqa: E731
    return {"info": pick("arfuse INFO"), "warn": pick("arfuse WARN")}


def read_counters(folder: Path) -> Dict[str, int]:
    """The plugin's counters summed over the engine's processes (one JSON file per process)."""
    total: Dict[str, int] = {}
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            for k, v in json.loads(f.read_text()).items():
                total[k] = total.get(k, 0) + int(v)
        except (ValueError, OSError):
            continue
    return total


def launch(engine: str, run: str, a: argparse.Namespace, model: str, texts: List[str], out: Path,
           command=server_command) -> Dict[str, Any]:
    """One server launch: start, wait for /health, generate, read its log and counters, stop."""
    plugin, graphs = run.startswith("on"), run != "on-eager" and run != "off-eager"
    caches = out / engine / ("caches-on-graphs" if run in ("on-graphs", "on-warm") else f"caches-{run}")
    counters = out / engine / f"counters-{run}"
    counters.mkdir(parents=True, exist_ok=True)
    for f in counters.glob("*.json"):
        f.unlink()
    log_path = out / engine / f"{run}.log"
    cmd = command(engine, model, a.tp, a.port, graphs)
    rec: Dict[str, Any] = {"command": " ".join(shlex.quote(c) for c in cmd), "plugin": plugin, "graphs": graphs,
                           "log": str(log_path)}
    with open(log_path, "w") as log:
        env = run_env(engine, plugin, caches, counters)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rec["started"] = wait_healthy(a.port, proc, a.start_timeout)
            if rec["started"]:
                generate(engine, a.port, model, texts[:2], 4)  # warm-up (first-request allocations)
                rec.update(generate(engine, a.port, model, texts, a.max_new_tokens))
                time.sleep(1.5)  # the counters are written at most once a second
        except Exception as e:  # noqa: BLE001 - recorded, the next run goes on
            rec["error"] = f"{type(e).__name__}: {e}"
        finally:
            stop(proc)
    rec.update(arfuse_lines(log_path.read_text(errors="replace")))
    rec["counters"] = read_counters(counters)
    return rec


def agreement(a: List[str], b: List[str]) -> float:
    return sum(x == y for x, y in zip(a, b)) / max(len(a), 1)


def verdicts(engine: str, runs: Dict[str, Dict[str, Any]], min_agreement: float) -> Dict[str, Any]:
    v: Dict[str, Any] = {"started": all(r.get("started") and "outputs" in r for r in runs.values())}
    on = [r for r in runs.values() if r["plugin"]]
    v["active"] = all(r["info"] and not r["warn"] and r["counters"].get(f"{engine}/tp/arfuse", 0) > 0 for r in on)
    if "on-warm" in runs and "on-graphs" in runs:
        v["warm_equal"] = runs["on-warm"].get("outputs") == runs["on-graphs"].get("outputs")
    pairs = {}
    for on_run, off_run in (("on-graphs", "off-graphs"), ("on-eager", "off-eager")):
        if on_run in runs and off_run in runs and "outputs" in runs[on_run] and "outputs" in runs[off_run]:
            pairs[f"{on_run} vs {off_run}"] = agreement(runs[on_run]["outputs"], runs[off_run]["outputs"])
    v["agreement"] = pairs
    v["agreement_ok"] = all(x >= min_agreement for x in pairs.values())
    if "on-graphs" in runs and "off-graphs" in runs:
        t_on, t_off = runs["on-graphs"].get("tokens_per_s"), runs["off-graphs"].get("tokens_per_s")
        v["tokens_per_s"] = {"on-graphs": t_on, "off-graphs": t_off,
                             "speedup": round(t_on / t_off, 3) if t_on and t_off else None}
    v["ok"] = bool(v["started"] and v["active"] and v.get("warm_equal", True) and v["agreement_ok"])
    return v


def main(argv: Optional[List[str]] = None, command=server_command, ngpu: Optional[int] = None) -> int:
    a = parse_args(argv)
    if a.check_args:
        return 0
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    model_dir = out / "model"
    model = make_model(model_dir, a.hidden, a.layers) if not (model_dir / "arfuse_e2e_model.json").exists() else \
        json.loads((model_dir / "arfuse_e2e_model.json").read_text())
    if a.make_model_only:
        print(json.dumps(model))
        return 0
    a.tp = a.tp or int(ngpu or 0)
    texts = prompts(a.prompts)
    report: Dict[str, Any] = {"tp": a.tp, "model": model, "prompts": len(texts), "max_new_tokens": a.max_new_tokens,
                              "engines": {}}
    for engine in a.engines:
        runs: Dict[str, Dict[str, Any]] = {}
        for run in a.runs:
            print(f"engine_e2e: {engine} {run} ...", flush=True)
            runs[run] = launch(engine, run, a, str(model_dir), texts, out, command)
            print(f"engine_e2e: {engine} {run}: started={runs[run].get('started')} "
                  f"tokens/s={runs[run].get('tokens_per_s')} counters={runs[run]['counters']}", flush=True)
        report["engines"][engine] = {"runs": runs, "verdicts": verdicts(engine, runs, a.min_agreement)}
    report["ok"] = all(e["verdicts"]["ok"] for e in report["engines"].values())
    path = Path(a.json) if a.json else out / "engine_e2e.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    for engine, e in report["engines"].items():
        print(f"engine_e2e: {engine}: {json.dumps(e['verdicts'])}")
    print(f"engine_e2e: {'ok' if report['ok'] else 'FAILED'}; JSON in {path}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(ngpu=int(os.environ.get("ENGINE_E2E_NGPU", "0") or 0) or None))
