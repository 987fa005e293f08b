"""bench/peers.py and scripts/perf_table.py without a GPU: the rotation rule (the same as arfuse
bench's), the slowest-rank median, argument errors, the arfuse-bench/4 document, and the per-machine
table that puts arfuse bench and the peers side by side with a "vs best peer" column."""
import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import ROOT


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


peers = load("bench/peers.py", "peers_under_test")
perf_table = load("scripts/perf_table.py", "perf_table_under_test")


def test_rotation_is_bench_rule():
    l2 = 50 << 20
    assert peers.rotation_sets(3 * 1024 * 7168 * 2, l2, 20) == 3  # 132 MB of sets >= 2 x L2
    assert peers.rotation_sets(3 * 7168 * 2, l2, 20) == 20  # capped by the graph's calls
    assert peers.rotation_sets(1 << 30, l2, 20) == 1
    assert peers.rotation_sets(3 * 7168 * 2, 0, 20) == 8  # L2 unknown
    assert peers.rotation_sets(0, l2, 20) == 1


def test_summary_is_the_median_of_the_slowest_rank_per_replay():
    s = peers.summarize([[0.04, 0.08, 0.02], [0.06, 0.01, 0.03]], 5)
    assert s == {"median_us": pytest.approx(15.0), "min_us": pytest.approx(7.5), "max_us": pytest.approx(20.0)}
    with pytest.raises(ValueError, match="different numbers of replays"):
        peers.summarize([[0.1], [0.1, 0.2]], 5)


@pytest.mark.parametrize("argv, says", [
    ([], "--nprocs N"), (["--nprocs", "1"], "--nprocs N"), (["--single", "--hidden", "100"], "--hidden 100"),
    (["--single", "--peers", "arfuse,nope"], "--peers arfuse,nope"), (["--single", "--tokens", "1,x"], "--tokens 1,x"),
    (["--single", "--calls", "1"], "--calls >= 2"), (["--nprocs", "2", "--single"], "not allowed"),
])
def test_argument_errors_name_the_argument(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        peers.parse_args(argv)
    assert e.value.code == 2
    assert says in capsys.readouterr().err


def test_arguments():
    a = peers.parse_args(["--nprocs", "4", "-d", "bfloat16", "--tokens", "1,16"])
    assert (a.nprocs, a.dtype, a.tokens, a.peers) == (4, "bf16", [1, 16], peers.MULTI_PEERS)
    a = peers.parse_args(["--single", "--peers", "arfuse,flashinfer"])
    assert a.single and a.peers == ["arfuse", "flashinfer"]


def test_document_and_ratio_to_the_best_correct_peer():
    a = peers.parse_args(["--nprocs", "2", "--tokens", "1", "--machine", "h200x2"])
    rows = [peers.make_row("arfuse", 1, 14336, timing={"median_us": 6.0, "min_us": 5.9, "max_us": 6.5}),
            peers.make_row("flashinfer-oneshot", 1, 14336, timing={"median_us": 8.0, "min_us": 8, "max_us": 9}),
            peers.make_row("nccl-torch", 1, 14336, timing={"median_us": 4.0, "min_us": 4, "max_us": 4}, wrong=1),
            peers.make_row("flashinfer-twoshot", 1, 14336, error="n/a: FlashInfer's two-shot needs more tokens"),
            peers.make_row("torch-symm-oneshot", 1, 14336, sets=8, footprint=1 << 27, l2_bytes=50 << 20,
                           timing={"median_us": 9.0, "min_us": 9, "max_us": 9})]
    env = {"date": "2026-12-01T00:00:00Z", "argv": ["--nprocs", "2"], "gpu": "NVIDIA H200 (sm_90)", "l2_bytes": 50 << 20}
    d = json.loads(json.dumps(peers.document(a, env, rows)))
    assert d["schema"] == "arfuse-bench/4" and d["suite"] == "peers" and d["mode"] == "procs" and d["procs"] == 2
    assert d["machine"] == "h200x2" and d["op"] == "fused" and d["proxy"] is False
    arf = d["results"][0]
    assert arf["role"] == "arfuse" and arf["ratio"] == 0.75 and arf["ratio_to"] == "flashinfer-oneshot"  # wrong one skipped
    assert d["results"][3]["error"].startswith("n/a") and "median_us" not in d["results"][3]
    assert d["results"][4]["rotation"] == {"sets": 8, "bytes": 1 << 27, "exceeds_2x_l2": True}


def test_without_torch_it_says_what_is_missing():
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("torch is installed here: the no-torch message cannot be seen")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "peers.py"), "--single", "--tokens", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3
    assert "PyTorch" in r.stderr and "pip install torch" in r.stderr


def bench_file(machine, proxy=False):
    return {"schema": "arfuse-bench/4", "arfuse": "arfuse 0.1.0", "date": "2026-12-01T01:00:00Z", "command": "arfuse bench",
            "gpu": "NVIDIA H200 (sm_90)", "driver": "580.159.04", "nccl": 22809, "op": "fused", "dtype": "bf16",
            "hidden": 7168, "ranks": 2, "virtual_ranks": proxy, "proxy": proxy, "mode": "in-process", "machine": machine,
            "results": [
                {"tokens": 1, "bytes": 14336, "algo": "auto:lowlatency", "role": "arfuse", "epilogue": "none",
                 "median_us": 5.0, "ratio": 0.5, "ratio_to": "nccl-symm", "wrong": 0},
                {"tokens": 1, "bytes": 14336, "algo": "nccl", "role": "baseline", "epilogue": "none", "median_us": 12.0,
                 "wrong": 0},
                {"tokens": 1, "bytes": 14336, "algo": "nccl-symm", "role": "baseline", "epilogue": "none",
                 "median_us": 10.0, "wrong": 0, "symmetric": True}]}


def test_one_table_per_machine_with_vs_best_peer(tmp_path):
    a = peers.parse_args(["--nprocs", "2", "--tokens", "1", "--machine", "h200x2"])
    rows = [peers.make_row("arfuse", 1, 14336, timing={"median_us": 6.0, "min_us": 6, "max_us": 6}),
            peers.make_row("flashinfer-oneshot", 1, 14336, timing={"median_us": 8.0, "min_us": 8, "max_us": 8}),
            peers.make_row("torch-symm-twoshot", 1, 14336, error="cannot run here: ImportError: no module")]
    env = {"date": "2026-12-01T02:00:00Z", "argv": ["--nprocs", "2"], "gpu": "NVIDIA H200 (sm_90)", "driver": "580"}
    (tmp_path / "h200x2_peers.json").write_text(json.dumps(peers.document(a, env, rows)))
    (tmp_path / "h200x2_bench.json").write_text(json.dumps(bench_file("h200x2")))
    (tmp_path / "h200_virtual.json").write_text(json.dumps(bench_file("h200", proxy=True)))
    parts = perf_table.tables(str(tmp_path))
    merged = [p for p in parts if p.startswith("**h200x2: fused")]
    assert len(merged) == 1, parts
    t = merged[0]
    assert "| tokens | auto | nccl | nccl-symm | peers:arfuse | flashinfer-oneshot | torch-symm-twoshot |" in t
    # best arfuse 5.0 (bench auto) over the best peer 8.0 (flashinfer; NCCL baselines are peers too: 10, 12)
    assert "| 1 | 5.00 | 12.00 | 10.00 | 6.00 | 8.00 | - | auto | flashinfer-oneshot | 0.62 |" in t, t
    proxy = [p for p in parts if p.startswith("**h200: fused")]
    assert len(proxy) == 1 and "PROXY" in proxy[0]
    alone = [p for p in parts if "h200x2_peers.json" in p.splitlines()[0]]
    assert alone and "cannot run here: ImportError" in alone[0] and "6.00 (0.75)" in alone[0]


def test_committed_tables_are_current():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "perf_table.py"), "--check", str(ROOT / "docs" / "perf_tables.md")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
