"""OPT-IN (ARFUSE_VLLM_TEST=1, and vLLM importable in this Python): the vLLM plugin's patterns inside
the REAL vLLM, in 2 gloo processes on CPU. vLLM's own init_distributed_environment and
initialize_model_parallel make the TP group; arfuse's replacements are registered with vLLM's
pattern-matcher helpers (MatcherQuantFP8, enable_fake_mode, the dtype checks of its own pass) into a
PatternMatcherPass; a graph traced from vLLM's ops (tensor_model_parallel_all_reduce ->
vllm.ir.ops.fused_add_rms_norm / rms_norm [-> static FP8 quant]), as vLLM's models produce, must
have those nodes replaced by the arfuse_vllm ops, and the rewritten graph must compute what the
original one computes. The arfuse calls are the FAKE backend's (integration_fake.py). Not in every
CI run: vLLM is a 336 MB wheel with heavy dependencies.
"""
import os

import pytest

if os.environ.get("ARFUSE_VLLM_TEST") != "1":
    pytest.skip("opt-in: set ARFUSE_VLLM_TEST=1 in a Python with vLLM installed (pip install vllm)",
                allow_module_level=True)
torch = pytest.importorskip("torch", reason="torch is not installed")
pytest.importorskip("vllm", reason="vLLM is not installed in this Python (pip install vllm)")

from mp_util import run_ranks  # noqa: E402

HIDDEN = 64


def _vllm_worker(world):
    import torch._inductor.pattern_matcher as pm
    from integration_fake import FakeBackend, reference_add_rmsnorm, seeded
    from torch._inductor.pattern_matcher import PatternMatcherPass

    os.environ["ARFUSE_VLLM"] = "1"
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state as ps
    from vllm.distributed import tensor_model_parallel_all_reduce

    import vllm.ir.ops as ir
    from arfuse.integrations import _glue
    from arfuse.integrations import vllm as plug

    _glue.set_backend(FakeBackend())
    with set_current_vllm_config(VllmConfig()):
        ps.init_distributed_environment(world_size=world.nranks, rank=world.rank, local_rank=0,
                                        distributed_init_method=f"file://{world.store}", backend="gloo")
        ps.initialize_model_parallel(tensor_model_parallel_size=world.nranks, backend="gloo")
        tp = ps.get_tp_group()
        f = _glue.Fusion("vllm", decline_safe=False)
        assert f.setup([_glue.Group("tp", tuple(tp.ranks), tp.rank_in_group, tp.world_size, tp.cpu_group,
                                    tp.all_reduce)], tp.cpu_group, 8, HIDDEN, torch.bfloat16)
        plug._fusion = f
        src = __import__(plug.PASS_MODULE, fromlist=["enable_fake_mode"])
        patterns = PatternMatcherPass(pass_name="arfuse_test")
        src.enable_fake_mode(lambda: plug.register_patterns(patterns, torch.bfloat16, "cpu"))()

        def model(x, residual, w):
            norm, res = ir.fused_add_rms_norm(tensor_model_parallel_all_reduce(x), residual, w, 1e-6)
            return norm, res

        x, residual, weight = seeded(world.rank, 3, HIDDEN, torch.bfloat16, seed=11)
        gm = pm.fwd_only(model, [x, residual, weight])
        before = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        want_norm, want_res = gm(x.clone(), residual.clone(), weight)
        matched = patterns.apply(gm.graph)
        gm.recompile()
        after = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        got_norm, got_res = gm(x.clone(), residual.clone(), weight)
        s = x.float()
        torch.distributed.all_reduce(s, group=tp.cpu_group)
        ref_norm, ref_res = reference_add_rmsnorm(s, residual, weight, 1e-6)
        close = lambda a, b: bool(torch.allclose(a.float(), b.float(), rtol=2e-2, atol=3e-2))  # noqa: E731
        return {"matched": matched, "before": before, "after": after, "vllm_vs_ref": close(want_norm, ref_norm),
                "arfuse_vs_vllm": close(got_norm, want_norm) and close(got_res, want_res),
                "counters": {"/".join(k): v for k, v in _glue.counters().items()}}


def test_vllm_patterns_match_vllms_graph_and_compute_the_same():
    results = run_ranks(_vllm_worker, 2, timeout=600)
    for res in results:
        assert res["matched"] >= 1, res
        assert not any("arfuse_vllm" in t for t in res["before"]) and any("arfuse_vllm" in t for t in res["after"]), res
        assert not any("all_reduce" in t and "arfuse" not in t for t in res["after"]), res  # the all-reduce is gone
        assert res["vllm_vs_ref"] and res["arfuse_vs_vllm"], res
        assert res["counters"].get("vllm/tp/arfuse") == 1, res
