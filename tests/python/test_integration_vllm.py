"""OPT-IN (ARFUSE_VLLM_TEST=1, and vLLM importable in this Python): the vLLM plugin's patterns inside
the REAL vLLM, in 2 gloo processes on CPU. vLLM's own init_distributed_environment and
initialize_model_parallel make the TP group; arfuse's replacements are registered with vLLM's
pattern-matcher helpers (MatcherQuantFP8, enable_fake_mode, the dtype checks of its own pass) into a
PatternMatcherPass; a graph traced from vLLM's ops (tensor_model_parallel_all_reduce ->
vllm.ir.ops.fused_add_rms_norm / rms_norm [-> static FP8 quant, or NVFP4 as scaled_fp4_quant leaves it
(its buffers from create_fp4_output_tensors, the functionalised .out op)]), as vLLM's models produce, must
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
    from arfuse.integrations import _vllm_ops
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
        _vllm_ops.set_state(f)  # as the pass (or the first op call) makes it
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

        # NVFP4 as vLLM's post-grad graphs hold it: scaled_fp4_quant's wrapper allocates its buffers
        # (create_fp4_output_tensors, swizzled) and calls the .out op, functionalised
        from torch._higher_order_ops.auto_functionalize import auto_functionalized
        from vllm._custom_ops import create_fp4_output_tensors

        def fp4_quant(norm, gs, cols=None):
            n = norm.shape[-1]
            q_buf, sf_buf = create_fp4_output_tensors(norm.numel() // n, n, norm.device, True, padded_n=cols)
            t = auto_functionalized(torch.ops._C.scaled_fp4_quant.out, input=norm, input_scale=gs,
                                    is_sf_swizzled_layout=True, output=q_buf, output_scale=sf_buf)
            return t[1], t[2]

        def nvfp4(x, residual, w, gs):
            norm, res = ir.fused_add_rms_norm(tensor_model_parallel_all_reduce(x), residual, w, 1e-6)
            q, sf = fp4_quant(norm, gs)
            return q, res, sf

        def nvfp4_first(x, w, gs):
            s = tensor_model_parallel_all_reduce(x)
            q, sf = fp4_quant(ir.rms_norm(s, w, 1e-5), gs)
            return q, s, sf

        def nvfp4_padded(x, residual, w, gs):  # padded_n: buffers arfuse's output does not fit
            norm, res = ir.fused_add_rms_norm(tensor_model_parallel_all_reduce(x), residual, w, 1e-6)
            q, sf = fp4_quant(norm, gs, cols=HIDDEN + 32)
            return q, res, sf

        def trace(fn, inputs):
            # under one fake mode, as Inductor's post-grad graphs are (the dtype checks read node meta)
            with FakeTensorMode() as fake:
                return pm.fwd_only(fn, [fake.from_tensor(t) for t in inputs])

        def targets(gm):  # a functionalised op is named with the op it wraps
            return [str(n.target) + (f"({n.args[0]})" if str(n.target) == "auto_functionalized" else "")
                    for n in gm.graph.nodes if n.op == "call_function"]

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
        out.update(_nvfp4_cases(world, plug, tp, trace, targets, patterns, nvfp4, nvfp4_first, nvfp4_padded))
        out["counters"] = {"/".join(k): v for k, v in _glue.counters().items()}
        # the class register() puts in the pass manager builds against this vLLM (its constructor needs
        # a VllmConfig with a real ModelConfig, i.e. a model: not run here)
        cls = plug.make_pass(src.AllReduceFusionPass)
        out["pass_class"] = [issubclass(cls, src.VllmPatternMatcherPass), cls.original is src.AllReduceFusionPass]
        return out


def _nvfp4_cases(world, plug, tp, trace, targets, patterns, nvfp4, nvfp4_first, nvfp4_padded):
    """The NVFP4 patterns in vLLM's graphs. vLLM's scaled_fp4_quant kernel has no CPU implementation, so
    the original graphs are matched, not run; the rewritten ones run (FAKE backend: arfuse's NVFP4 in
    torch, arfuse._torch_quant, which restates the kernels' formats.h) and are compared with vLLM's own
    CPU reference of scaled_fp4_quant (ref_nvfp4_quant) and read back with vLLM's own helpers
    (break_fp4_bytes, convert_swizzled_to_linear) applied to the same normalised rows."""
    from integration_fake import reference_add_rmsnorm, seeded
    from torch._subclasses.fake_tensor import FakeTensorMode

    from vllm.model_executor.layers.quantization.utils import nvfp4_emulation_utils as emu

    out = {}
    # g a power of two: the two products of the block scale are then exact in any order, so vLLM's
    # reference and arfuse must give the same bytes (what is compared: layout, packing, scale convention,
    # rounding); g = 448 * 6 / amax (a calibrated scale): compared after dequantisation
    for name, fn, tokens, first, gval in (("nvfp4", nvfp4, 3, False, 4.0), ("nvfp4_first", nvfp4_first, 3, True, 4.0),
                                          ("nvfp4_big", nvfp4, 12, False, None),
                                          ("nvfp4_calibrated", nvfp4, 3, False, None)):
        x, residual, weight = seeded(world.rank, tokens, HIDDEN, torch.bfloat16, seed=13)
        s = x.float()
        torch.distributed.all_reduce(s, group=tp.cpu_group)
        if tokens > 8:  # above the communicator's size the op sums with vLLM's all-reduce (in bf16)
            s = tp.all_reduce(x.clone()).float()
        res_in = torch.zeros_like(x) if first else residual
        norm_ref, res_ref = reference_add_rmsnorm(s, res_in, weight, 1e-5 if first else 1e-6)
        g = torch.tensor([[gval if gval else 448.0 * 6.0 / float(norm_ref.float().abs().max())]], dtype=torch.float32)
        inputs = (x, weight, g) if first else (x, residual, weight, g)
        gm = trace(fn, inputs)
        before = targets(gm)
        matched = patterns.apply(gm.graph)
        gm.recompile()
        r = {"matched": matched, "before": before, "after": targets(gm)}
        q, res, sf = gm(*[t.clone() for t in inputs])
        r["shapes"] = [(tuple(t.shape), str(t.dtype)) for t in (q, res, sf)]
        r["residual_equal"] = bool(torch.equal(res, res_ref))
        ref_vals, ref_sf = emu.ref_nvfp4_quant(norm_ref.float(), g.reshape(()), 16)
        got_vals = emu.break_fp4_bytes(q, torch.float32)
        got_sf = emu.convert_swizzled_to_linear(sf.view(torch.float8_e4m3fn), tokens, HIDDEN, 16).float()
        r["values_differ"] = int((got_vals != ref_vals).sum())
        r["scales_differ"] = int((got_sf != ref_sf).sum())
        padded = emu.convert_swizzled_to_linear(sf.view(torch.float8_e4m3fn), sf.shape[0], HIDDEN, 16).float()
        r["padding_zero"] = bool((padded[tokens:] == 0).all())  # the rows up to 128 (hidden 64: no padded column)
        deq = emu.dequantize_to_dtype(q, sf.view(torch.float8_e4m3fn), 1.0 / g.reshape(()), torch.float32)
        # NVFP4's error: at most half a step of E2M1 (1 at the top of [4, 6]) times the block scale
        r["dequant_close"] = bool(((deq - norm_ref.float()).abs() <= got_sf.repeat_interleave(16, -1) / g + 1e-6).all())
        out[name] = r
    # buffers of another shape (padded_n): the NVFP4 pattern is not applied, the plain fused-add one is
    x, residual, weight = seeded(world.rank, 3, HIDDEN, torch.bfloat16, seed=13)
    gm = trace(nvfp4_padded, (x, residual, weight, torch.tensor([[4.0]])))
    before = targets(gm)
    out["nvfp4_padded"] = {"matched": patterns.apply(gm.graph), "before": before, "after": targets(gm)}
    # the fake implementation: the shapes and dtypes vLLM's allocator gives (create_fp4_output_tensors)
    op = torch.ops.arfuse_vllm.all_reduce_add_rms_norm_nvfp4
    fake = []
    with FakeTensorMode():
        for shape, with_res in (((3, HIDDEN), True), ((2, 5, HIDDEN), False), ((129, 48), True)):
            xx, ww = torch.empty(shape, dtype=torch.bfloat16), torch.empty(shape[-1], dtype=torch.bfloat16)
            rr = torch.empty(shape, dtype=torch.bfloat16) if with_res else None
            fake.append([(tuple(t.shape), str(t.dtype)) for t in op(xx, rr, ww, 1e-6, torch.empty(1, 1), 8, shape[-1])])
    out["nvfp4_fake"] = fake
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
        for name in ("nvfp4", "nvfp4_first", "nvfp4_big", "nvfp4_calibrated"):
            r = res[name]
            assert r["matched"] == 1, (name, r)
            assert "auto_functionalized(_C.scaled_fp4_quant.out)" in r["before"], (name, r)
            assert "arfuse_vllm.all_reduce_add_rms_norm_nvfp4.default" in r["after"], (name, r)
            assert not any("scaled_fp4_quant" in t or ("all_reduce" in t and "arfuse" not in t)
                           for t in r["after"]), (name, r)
            tokens = 12 if name == "nvfp4_big" else 3
            assert r["shapes"] == [((tokens, HIDDEN // 2), "torch.uint8"), ((tokens, HIDDEN), "torch.bfloat16"),
                                   ((128, 1), "torch.int32")], (name, r)
            assert [r["residual_equal"], r["padding_zero"], r["dequant_close"]] == [True] * 3, (name, r)
            if name != "nvfp4_calibrated":  # g a power of two: the same bytes as vLLM's reference
                assert r["values_differ"] == 0 and r["scales_differ"] == 0, (name, r)
        p = res["nvfp4_padded"]
        assert p["matched"] == 1 and "arfuse_vllm.all_reduce_add_rms_norm.default" in p["after"], p
        assert "arfuse_vllm.all_reduce_add_rms_norm_nvfp4.default" not in p["after"], p
        assert any("scaled_fp4_quant" in t for t in p["after"]), p  # vLLM's quant stays
        assert res["nvfp4_fake"] == [
            [((3, 32), "torch.uint8"), ((3, HIDDEN), "torch.bfloat16"), ((128, 1), "torch.int32")],
            [((10, 32), "torch.uint8"), ((2, 5, HIDDEN), "torch.bfloat16"), ((128, 1), "torch.int32")],
            [((129, 24), "torch.uint8"), ((129, 48), "torch.bfloat16"), ((256, 1), "torch.int32")]], res["nvfp4_fake"]
        # 4 plain/Gemma + nvfp4, nvfp4_first, nvfp4_calibrated by arfuse; nvfp4_big (12 > 8 tokens) by
        # vLLM's all-reduce + add+RMSNorm + arfuse's NVFP4 in torch
        assert res["counters"].get("vllm/tp/arfuse") == 7, res
        assert res["counters"].get("vllm/tp/engine-all-reduce") == 1, res
        assert res["pass_class"] == [True, True], res
