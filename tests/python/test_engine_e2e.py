"""scripts/engine_e2e.py's CPU parts (the script needs >= 2 GPUs and real engines to run whole):
argument handling, the verdicts and the JSON, one whole run of every launch against a stand-in server
on 127.0.0.1 (engine_standin_server.py: health, the engines' request shapes, the INFO line, the
counters file), and the generated model and tokenizer when transformers and tokenizers import."""
import importlib.util
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location("engine_e2e", ROOT / "scripts" / "engine_e2e.py")
e2e = importlib.util.module_from_spec(spec)
spec.loader.exec_module(e2e)
STANDIN = Path(__file__).with_name("engine_standin_server.py")


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("argv, what", [(["--engines", "tgi"], "unknown"), (["--runs", "on-warm"], "on-warm"),
                                        (["--prompts", "0"], "--prompts"), (["--hidden", "100"], "--hidden"),
                                        (["--min-agreement", "2"], "--min-agreement")])
def test_bad_arguments_name_the_fix(argv, what, capsys):
    with pytest.raises(SystemExit) as e:
        e2e.parse_args(argv)
    assert e.value.code == 2 and what in capsys.readouterr().err


def test_defaults_and_the_shell_entry():
    a = e2e.parse_args([])
    assert a.engines == ["sglang", "vllm"] and a.runs == list(e2e.RUNS) and a.tp == 0
    r = subprocess.run(["bash", str(ROOT / "scripts" / "engine_e2e.sh"), "--engines", "sglang"], capture_output=True,
                       text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 3 and "needs >= 2 GPUs" in r.stderr, r  # no nvidia-smi on this PATH: 0 GPUs
    r = subprocess.run(["bash", str(ROOT / "scripts" / "engine_e2e.sh"), "--runs", "nope"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "unknown" in r.stderr, r


def test_server_commands_switch_graphs_and_the_plugin(tmp_path):
    assert "--disable-cuda-graph" in e2e.server_command("sglang", "M", 4, 1, False)
    assert "--disable-cuda-graph" not in e2e.server_command("sglang", "M", 4, 1, True)
    v = e2e.server_command("vllm", "M", 8, 1, False)
    assert v[:3] == ["vllm", "serve", "M"] and "--enforce-eager" in v and "-cc.pass_config.fuse_allreduce_rms=True" in v
    env = e2e.run_env("vllm", True, tmp_path, tmp_path / "c")
    assert env["ARFUSE_VLLM"] == "1" and "ARFUSE_SGLANG" not in env and env["VLLM_CACHE_ROOT"].startswith(str(tmp_path))
    assert "ARFUSE_VLLM" not in e2e.run_env("vllm", False, tmp_path, tmp_path / "c")


def test_verdicts():
    base = {"started": True, "outputs": ["a", "b", "c", "d"], "info": [], "warn": [], "counters": {},
            "tokens_per_s": 100.0}
    on = {**base, "plugin": True, "info": ["arfuse INFO vllm: ..."], "counters": {"vllm/tp/arfuse": 3},
          "tokens_per_s": 120.0}
    runs = {"off-graphs": {**base, "plugin": False}, "on-graphs": on, "on-warm": dict(on)}
    v = e2e.verdicts("vllm", runs, 0.75)
    assert v["ok"] and v["warm_equal"] and v["agreement"] == {"on-graphs vs off-graphs": 1.0}
    assert v["tokens_per_s"] == {"on-graphs": 120.0, "off-graphs": 100.0, "speedup": 1.2}
    runs["on-graphs"] = {**on, "outputs": ["a", "b", "x", "d"]}
    v = e2e.verdicts("vllm", runs, 0.75)
    assert v["agreement"]["on-graphs vs off-graphs"] == 0.75 and v["agreement_ok"] and not v["warm_equal"]
    assert not v["ok"]
    runs = {"off-graphs": {**base, "plugin": False}, "on-graphs": {**on, "warn": ["arfuse WARN vllm 0.33.0: ..."]}}
    assert not e2e.verdicts("vllm", runs, 0.75)["active"]


def _standin(engine, model, tp, port, graphs):
    return [sys.executable, str(STANDIN), engine, str(port)]


@pytest.mark.parametrize("warn", [False, True])
def test_every_launch_against_a_standin_server(tmp_path, monkeypatch, warn):
    out = tmp_path / "e2e"
    (out / "model").mkdir(parents=True)
    (out / "model" / "arfuse_e2e_model.json").write_text(json.dumps({"architecture": "stand-in"}))
    if warn:
        monkeypatch.setenv("STANDIN_WARN", "1")
    rc = e2e.main(["--out", str(out), "--prompts", "3", "--max-new-tokens", "5", "--port", str(_port()),
                   "--start-timeout", "60"], command=_standin, ngpu=2)
    report = json.loads((out / "engine_e2e.json").read_text())
    assert report["tp"] == 2 and report["prompts"] == 3 and set(report["engines"]) == {"sglang", "vllm"}
    for engine, e in report["engines"].items():
        assert set(e["runs"]) == set(e2e.RUNS)
        for name, r in e["runs"].items():
            assert r["started"] and len(r["outputs"]) == 3 and r["completion_tokens"] == 15, (engine, name, r)
            assert r["plugin"] == name.startswith("on") and r["graphs"] == ("eager" not in name)
            if r["plugin"] and not warn:
                assert r["info"] and r["counters"] == {f"{engine}/tp/arfuse": 7}, r
        v = e["verdicts"]
        assert v["started"] and v["warm_equal"] and v["agreement_ok"] and v["active"] is (not warn), v
    assert rc == (1 if warn else 0) and report["ok"] is (not warn)


def test_generated_model_and_tokenizer(tmp_path):
    for m in ("torch", "transformers", "tokenizers"):
        pytest.importorskip(m, reason=f"{m} is not installed: the model generation needs it")
    summary = e2e.make_model(tmp_path / "m", hidden=128, layers=2)
    from transformers import AutoConfig, AutoTokenizer

    cfg = AutoConfig.from_pretrained(str(tmp_path / "m"))
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "m"))
    assert cfg.architectures == ["Qwen3ForCausalLM"] and cfg.hidden_size == 128 and summary["layers"] == 2
    ids = tok(e2e.prompts(1)[0])["input_ids"]
    assert ids and max(ids) < cfg.vocab_size and (tmp_path / "m" / "model.safetensors").is_file()
