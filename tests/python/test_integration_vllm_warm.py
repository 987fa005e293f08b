"""OPT-IN (ARFUSE_VLLM_TEST=1, vLLM importable; see test_integration_vllm.py for the CPU set-up): the
vLLM plugin across two launches and across compile ranges, with the REAL vLLM modules in 2 gloo
processes on CPU, the arfuse calls being the FAKE backend's (integration_fake.py).

  warm start   launch 1 builds a real VllmConfig (a tiny local model config, no weights), vLLM's own
               PostGradPassManager.configure() builds the plugin's pass (its constructor makes the
               communicators), the manager rewrites a graph traced from vLLM's ops for the decode
               range, and the rewritten graph is stored with vLLM's own serializer
               (VllmSerializableFunction.serialize_graph_module, what its AOT artifact holds). Launch 2,
               fresh processes, loads the plugin as vLLM's workers do and runs the stored graph without
               ever constructing the pass (vLLM 0.33/0.34 with torch >= 2.14 on a warm cache): the op
               must make its state at its first call and compute what vLLM's graph computes; with a
               rank that cannot make it, one WARN naming vLLM's version and vLLM's own path, no raise.
  cache key    the plugin on, off, with another decode window or another arfuse version gives
               another VllmConfig hash and another AOT key (aot_compile_hash_factors), and the decode
               window is one of vLLM's compile-range endpoints.
  prefill      vLLM's PostGradPassManager leaves a prefill-range graph exactly as it does without the
               plugin; the decode-range graph holds the arfuse op.
"""
import os
import subprocess
import sys
import textwrap

import pytest

if os.environ.get("ARFUSE_VLLM_TEST") != "1":
    pytest.skip("opt-in: set ARFUSE_VLLM_TEST=1 in a Python with vLLM installed (pip install vllm)",
                allow_module_level=True)
torch = pytest.importorskip("torch", reason="torch is not installed")
pytest.importorskip("vllm", reason="vLLM is not installed in this Python (pip install vllm)")

from conftest import PACKAGE_DIR  # noqa: E402
from mp_util import run_ranks  # noqa: E402

HIDDEN = 64
WINDOW = 8  # ARFUSE_VLLM_MAX_TOKENS in these tests
ENV = {"ARFUSE_VLLM": "1", "ARFUSE_VLLM_MAX_TOKENS": str(WINDOW), "VLLM_TARGET_DEVICE": "cpu"}


def _model_dir(tmp: str) -> str:
    """A tiny Llama configuration on disk (config.json only: vLLM's ModelConfig reads it, no weights)."""
    import json

    os.makedirs(tmp, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
           "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
           "vocab_size": 256, "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16",
           "tie_word_embeddings": False}
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f)
    return tmp


def _vllm_env():
    """vLLM's kernel library (the fusion modules read torch.ops._C at import) and the plugin loaded as
    vLLM loads general plugins in each process; the pass manager's AllReduceFusionPass exists on CUDA
    platforms only, so the CPU platform is given vLLM's own class under that name first."""
    import importlib

    if not hasattr(torch.ops._C, "rotary_embedding"):
        importlib.import_module("vllm._C_stable_libtorch")
    from arfuse.integrations import vllm as plug

    pmgr = importlib.import_module(plug.PASS_MANAGER)
    src = importlib.import_module(plug.PASS_MODULE)
    if not hasattr(pmgr, plug.PASS_NAME):
        pmgr.AllReduceFusionPass = src.AllReduceFusionPass
    from vllm.plugins import load_general_plugins

    load_general_plugins()  # the arfuse entry point is not installed here: call it as vLLM would
    plug.register()
    return plug, pmgr, src


def _config(model_dir: str):
    from vllm.config import CompilationConfig, ModelConfig, ParallelConfig, VllmConfig
    from vllm.config.compilation import PassConfig

    mc = ModelConfig(model=model_dir, tokenizer=model_dir, skip_tokenizer_init=True, dtype="bfloat16")
    return VllmConfig(model_config=mc, parallel_config=ParallelConfig(tensor_parallel_size=2),
                      compilation_config=CompilationConfig(pass_config=PassConfig(fuse_allreduce_rms=True)))


def _dist(world, config):
    from vllm.distributed import parallel_state as ps

    ps.init_distributed_environment(world_size=world.nranks, rank=world.rank, local_rank=0,
                                    distributed_init_method=f"file://{world.store}", backend="gloo")
    ps.initialize_model_parallel(tensor_model_parallel_size=world.nranks, backend="gloo")
    tp = ps.get_tp_group()
    tp.use_custom_op_call = True  # on CUDA vLLM's graphs hold torch.ops.vllm.all_reduce: the same here
    return tp


def _graph():
    """A decoder layer boundary as vLLM's models trace it: all-reduce -> fused_add_rms_norm."""
    import torch._inductor.pattern_matcher as pm
    from torch._subclasses.fake_tensor import FakeTensorMode

    import vllm.ir.ops as ir
    from vllm.distributed import tensor_model_parallel_all_reduce

    def layer(x, residual, w):
        norm, res = ir.fused_add_rms_norm(tensor_model_parallel_all_reduce(x), residual, w, 1e-6)
        return norm, res

    inputs = [torch.empty(3, HIDDEN, dtype=torch.bfloat16) for _ in range(2)] + [torch.empty(HIDDEN,
                                                                                            dtype=torch.bfloat16)]
    with FakeTensorMode() as fake:
        return pm.fwd_only(layer, [fake.from_tensor(t) for t in inputs])


def _targets(gm):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def _rewrite(config, compile_range):
    """vLLM's own post-grad pass manager, configured from `config`, run on the layer's graph."""
    from vllm.compilation.passes.inductor_pass import pass_context
    from vllm.compilation.passes.pass_manager import PostGradPassManager
    from vllm.config import set_current_vllm_config
    from vllm.config.utils import Range

    gm = _graph()
    with set_current_vllm_config(config):
        manager = PostGradPassManager()
        manager.configure(config)
        with pass_context(Range(*compile_range)):
            manager(gm.graph)
    gm.recompile()
    return gm, manager


def _launch1_worker(world, model_dir):
    from integration_fake import FakeBackend

    from arfuse.integrations import _glue

    _glue.set_backend(FakeBackend())
    plug, _, _ = _vllm_env()
    config = _config(model_dir)
    from vllm.compilation.caching import VllmSerializableFunction
    from vllm.config import set_current_vllm_config

    with set_current_vllm_config(config):
        tp = _dist(world, config)
        gm, _ = _rewrite(config, (1, WINDOW))
    return {"after": _targets(gm), "graph": VllmSerializableFunction.serialize_graph_module(gm),
            "fusion": bool(plug.fusion() and plug.fusion().active), "tp": tp.world_size}


def _launch2_worker(world, graph, fail_ranks):
    import logging

    from integration_fake import FakeBackend, reference_add_rmsnorm, seeded

    from arfuse.integrations import _glue

    lines = []

    class H(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logging.getLogger("arfuse.integrations").addHandler(H())
    _glue.set_backend(FakeBackend(tuple(fail_ranks)))
    plug, _, _ = _vllm_env()  # a worker of the second launch: the plugin loaded, no pass ever built
    from vllm.compilation.caching import VllmSerializableFunction
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        tp = _dist(world, None)
        from torch._subclasses.fake_tensor import FakeTensorMode

        gm = VllmSerializableFunction.deserialize_graph_module(graph, FakeTensorMode())
        gm.recompile()  # its code from the stored graph, as vLLM does when it loads an artifact
        x, residual, weight = seeded(world.rank, 3, HIDDEN, torch.bfloat16, seed=21)
        norm, res = gm(x.clone(), residual.clone(), weight)
        s = x.float()
        torch.distributed.all_reduce(s, group=tp.cpu_group)
        import vllm.ir.ops as ir

        engine = ir.fused_add_rms_norm(tp.all_reduce(x.clone()), residual.clone(), weight, 1e-6)
        ref = reference_add_rmsnorm(s, residual, weight, 1e-6)
    pack = lambda t: t.float().tolist()  # noqa: E731
    return {"norm": pack(norm), "res": pack(res), "ref": [pack(t) for t in ref], "engine": [pack(t) for t in engine],
            "counters": {"/".join(k): v for k, v in _glue.counters().items()}, "lines": lines,
            "active": bool(plug.fusion() and plug.fusion().active)}


def test_warm_start_runs_a_stored_graph_without_the_pass(tmp_path):
    model_dir = _model_dir(str(tmp_path / "model"))
    first = run_ranks(_launch1_worker, 2, (model_dir,), timeout=300, env=ENV)
    for r in first:
        assert r["fusion"] and r["tp"] == 2, r
        assert "arfuse_vllm.all_reduce_add_rms_norm.default" in r["after"], r["after"]
        assert not any(t.startswith("vllm.all_reduce") for t in r["after"]), r["after"]  # vLLM's all-reduce is gone
    graphs = [r["graph"] for r in first]
    # launch 2: each rank loads its own stored graph (rank_i_j in vLLM's cache) on a warm cache
    second = run_ranks(_launch2_worker, 2, (graphs[0], ()), timeout=300, env=ENV)
    for r in second:
        assert r["active"], r["lines"]
        assert torch.allclose(torch.tensor(r["norm"]), torch.tensor(r["ref"][0]), rtol=2e-2, atol=3e-2), r
        assert torch.equal(torch.tensor(r["res"]), torch.tensor(r["ref"][1])), r
        assert r["counters"] == {"vllm/tp/arfuse": 1}, r["counters"]
    assert second[0]["norm"] == second[1]["norm"]
    info = [line for r in second for line in r["lines"] if line.startswith("arfuse INFO vllm")]
    assert len(info) == 1 and f"up to {WINDOW} tokens" in info[0], info
    # a rank that cannot make the state: every rank runs vLLM's own all-reduce and norm, one WARN
    failed = run_ranks(_launch2_worker, 2, (graphs[0], (1,)), timeout=300, env=ENV)
    warns = [line for r in failed for line in r["lines"] if "WARN" in line]
    version = __import__("importlib.metadata").metadata.version("vllm")
    assert len(warns) == 1 and warns[0].startswith(f"arfuse WARN vllm {version}: arfuse not used"), warns
    assert "rank 1: tp group (2 ranks): RuntimeError: FAKE: rank 1 was told to fail" in warns[0], warns
    for r in failed:
        assert not r["active"] and r["counters"] == {"vllm/tp/engine": 1}, r
        assert r["norm"] == r["engine"][0] and r["res"] == r["engine"][1], r  # vLLM's own ops, bit for bit


_KEY = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, os.environ["ARFUSE_TEST_DIR"])
    import arfuse
    if os.environ.get("FAKE_ARFUSE_VERSION"):
        arfuse.__version__ = os.environ["FAKE_ARFUSE_VERSION"]
    from test_integration_vllm_warm import _config, _vllm_env
    _vllm_env()
    from vllm.compilation.caching import aot_compile_hash_factors
    c = _config(os.environ["MODEL_DIR"])
    print(json.dumps({"hash": c.compute_hash(), "aot": str(aot_compile_hash_factors(c)),
                      "endpoints": c.compilation_config.compile_ranges_endpoints,
                      "arfuse": c.additional_config.get("arfuse")}))
""")


def _key(model_dir, **env):
    full = {**os.environ, **ENV, "MODEL_DIR": model_dir, "ARFUSE_TEST_DIR": os.path.dirname(__file__),
            "PYTHONPATH": os.pathsep.join([str(PACKAGE_DIR), os.path.dirname(__file__)]), **env}
    full = {k: v for k, v in full.items() if v is not None}
    r = subprocess.run([sys.executable, "-c", _KEY], capture_output=True, text=True, timeout=300, env=full)
    assert r.returncode == 0, r.stderr[-3000:]
    import json

    return json.loads(r.stdout.strip().splitlines()[-1])


def test_what_changes_the_graph_enters_vllms_compile_cache_key(tmp_path):
    model_dir = _model_dir(str(tmp_path / "model"))
    import arfuse

    on = _key(model_dir)
    assert on["arfuse"] == {"vllm_plugin": True, "version": arfuse.__version__, "max_tokens": WINDOW}, on
    assert WINDOW in on["endpoints"], on  # the decode range [1, WINDOW] is compiled apart
    off = _key(model_dir, ARFUSE_VLLM="0")
    wider = _key(model_dir, ARFUSE_VLLM_MAX_TOKENS=str(2 * WINDOW))
    newer = _key(model_dir, FAKE_ARFUSE_VERSION="99.0.0")
    assert off["arfuse"] is None and WINDOW not in (off["endpoints"] or []), off
    keys = [(k["hash"], k["aot"]) for k in (on, off, wider, newer)]
    for i in range(len(keys)):
        for j in range(i):
            assert keys[i][0] != keys[j][0] and keys[i][1] != keys[j][1], (i, j, keys)
    assert _key(model_dir) == on  # and the same settings give the same key


def _ranges_worker(world, model_dir):
    from integration_fake import FakeBackend

    from arfuse.integrations import _glue

    _glue.set_backend(FakeBackend())
    plug, pmgr, src = _vllm_env()
    config = _config(model_dir)
    from vllm.config import set_current_vllm_config

    out = {}
    with set_current_vllm_config(config):
        _dist(world, config)
        for name, rng in (("decode", (1, WINDOW)), ("prefill", (WINDOW + 1, 2048))):
            gm, manager = _rewrite(config, rng)
            ours = [p for p in manager.passes if type(p).__name__ == "ArfuseAllReduceFusionPass"]
            out[name] = {"after": _targets(gm), "ours": len(ours),
                         "applies": [p.is_applicable_for_range(__import__("vllm.config.utils").config.utils.Range(*rng))
                                     for p in ours]}
        # the same manager with the plugin's pass swapped back for vLLM's own (disabled here: no FlashInfer)
        pmgr.AllReduceFusionPass = pmgr.AllReduceFusionPass.original
        out["stock_prefill"] = _targets(_rewrite(config, (WINDOW + 1, 2048))[0])
    return out


def test_prefill_graph_left_as_vllm_builds_it(tmp_path):
    model_dir = _model_dir(str(tmp_path / "model"))
    for r in run_ranks(_ranges_worker, 2, (model_dir,), timeout=300, env=ENV):
        assert r["decode"]["ours"] == 1 and r["decode"]["applies"] == [True], r
        assert "arfuse_vllm.all_reduce_add_rms_norm.default" in r["decode"]["after"], r
        assert r["prefill"]["applies"] == [False], r
        assert r["prefill"]["after"] == r["stock_prefill"], r  # unchanged: as vLLM builds it
        assert not any("arfuse" in t for t in r["prefill"]["after"]), r
