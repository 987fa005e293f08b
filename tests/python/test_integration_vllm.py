"""OPT-IN (ARFUSE_VLLM_TEST=1, and vLLM importable in this Python): the vLLM plugin's patterns inside
the REAL vLLM, in 2 gloo processes on CPU. vLLM's own init_distributed_environment and
initialize_model_parallel make the TP group; arfuse's replacements are registered with vLLM's
pattern-matcher helpers (MatcherQuantFP8, enable_fake_mode, the dtype checks of its own pass) into a
PatternMatcherPass; a graph traced from vLLM's ops (tensor_model_parallel_all_reduce ->
vllm.ir.ops.fused_add_rms_norm / rms_norm [-> static FP8 quant]), as vLLM's models produce, must
have those nodes replaced by the arfuse_vllm ops, and the rewritten graph must compute what the
original one computes. The arfuse calls are the FAKE backend's (integration_fake.py). Not in every
CI run: vLLM is a 336 MB wheel with heavy dependencies. Without a GPU driver, vLLM's kernel library
needs a libcuda.so.1 to load: put CUDA's stub on LD_LIBRARY_PATH (a folder with libcuda.so.1 linked
to /usr/local/cuda/lib64/stubs/libcuda.so) and set VLLM_TARGET_DEVICE=cpu.
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
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu" if not torch.cuda.is_available() else "cuda")
    import importlib

    # the fusion modules read torch.ops._C at import: vLLM's kernel library (on a machine without a
    # GPU driver it loads against CUDA's stub libcuda.so.1, put on LD_LIBRARY_PATH by the caller)
    if not hasattr(torch.ops._C, "rotary_embedding"):
        importlib.import_module("vllm._C_stable_libtorch")
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
        # On CUDA vLLM all-reduces through its custom op torch.ops.vllm.all_reduce (what its graphs
        # hold, and what its own pass matches); the CPU platform calls gloo in place instead.
        tp.use_custom_op_call = True
        f = _glue.Fusion("vllm", decline_safe=False)
        assert f.setup([_glue.Group("tp", tuple(tp.ranks), tp.rank_in_group, tp.world_size, tp.cpu_group,
                                    tp.all_reduce)], tp.cpu_group, 8, HIDDEN, torch.bfloat16)
        plug._fusion = f
        src = __import__(plug.PASS_MODULE, fromlist=["enable_fake_mode"])
        patterns = PatternMatcherPass(pass_name="arfuse_test")
        src.enable_fake_mode(lambda: plug.register_patterns(patterns, torch.bfloat16, "cpu"))()

        from torch._subclasses.fake_tensor import FakeTensorMode

        def model(x, residual, w):
            norm, res = ir.fused_add_rms_norm(tensor_model_parallel_all_reduce(x), residual, w, 1e-6)
            return norm, res

        def first_layer(x, w):
            s = tensor_model_parallel_all_reduce(x)
            return ir.rms_norm(s, w, 1e-5), s

        def gemma_add(x, residual, w):
            norm, res = ir.fused_add_rms_norm(tensor_model_parallel_all_reduce(x), residual, w.float() + 1.0, 1e-6)
            return norm, res

        def gemma_first(x, w):
            s = tensor_model_parallel_all_reduce(x)
            return ir.rms_norm(s, w.float() + 1.0, 1e-6), s

        quant = src.MatcherQuantFP8(src.kFp8StaticTensorSym)

        def fp8(x, residual, w, scale):
            norm, res = ir.fused_add_rms_norm(tensor_model_parallel_all_reduce(x), residual, w, 1e-6)
            return quant(norm, scale)[0], res

        def trace(fn, inputs):
            # under one fake mode, as Inductor's post-grad graphs are (the dtype checks read node meta)
            with FakeTensorMode() as fake:
                return pm.fwd_only(fn, [fake.from_tensor(t) for t in inputs])

        def targets(gm):
            return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]

        x, residual, weight = seeded(world.rank, 3, HIDDEN, torch.bfloat16, seed=11)
        s = x.float()
        torch.distributed.all_reduce(s, group=tp.cpu_group)
        close = lambda a, b: bool(torch.allclose(a.float(), b.float(), rtol=2e-2, atol=3e-2))  # noqa: E731
        out = {}
        for name, fn, inputs, run in (("add", model, (x, residual, weight), True),
                                      ("first", first_layer, (x, weight), True),
                                      ("gemma_add", gemma_add, (x, residual, weight), True),
                                      ("gemma_first", gemma_first, (x, weight), True),
                                      ("fp8", fp8, (x, residual, weight, torch.tensor([0.05])), False)):
            gm = trace(fn, inputs)
            before = targets(gm)
            want = gm(*[t.clone() for t in inputs]) if run else None
            matched = patterns.apply(gm.graph)
            gm.recompile()
            r = {"matched": matched, "before": before, "after": targets(gm)}
            if run:
                got = gm(*[t.clone() for t in inputs])
                ref = reference_add_rmsnorm(s, residual if "add" in name else torch.zeros_like(x),
                                            weight.float() + 1.0 if "gemma" in name else weight,
                                            1e-5 if name == "first" else 1e-6)
                r["vllm_vs_ref"] = close(want[0], ref[0])
                r["arfuse_vs_vllm"] = close(got[0], want[0]) and close(got[1], want[1])
            out[name] = r
        out["counters"] = {"/".join(k): v for k, v in _glue.counters().items()}
        # the class register() puts in the pass manager builds against this vLLM (its constructor needs
        # a VllmConfig with a real ModelConfig, i.e. a model: not run here)
        cls = plug.make_pass(src.AllReduceFusionPass)
        out["pass_class"] = [issubclass(cls, src.VllmPatternMatcherPass), cls.original is src.AllReduceFusionPass]
        return out


def test_vllm_patterns_match_vllms_graph_and_compute_the_same():
    results = run_ranks(_vllm_worker, 2, timeout=600)
    for res in results:
        for name, want_op in (("add", "all_reduce_add_rms_norm.default"), ("first", "all_reduce_add_rms_norm.default"),
                              ("gemma_add", "all_reduce_add_rms_norm_plus_one.default"),
                              ("gemma_first", "all_reduce_add_rms_norm_plus_one.default"),
                              ("fp8", "all_reduce_add_rms_norm_fp8.default")):
            r = res[name]
            assert r["matched"] == 1, (name, r)
            assert not any("arfuse_vllm" in t for t in r["before"]), (name, r)
            assert f"arfuse_vllm.{want_op}" in r["after"], (name, r)
            assert not any("all_reduce" in t and "arfuse" not in t for t in r["after"]), (name, r)  # it is gone
            if name != "fp8":  # vLLM's FP8 quant kernel has no CPU implementation: matched, not run
                assert r["vllm_vs_ref"] and r["arfuse_vs_vllm"], (name, r)
        assert res["counters"].get("vllm/tp/arfuse") == 4, res
        assert res["pass_class"] == [True, True], res
