"""A whole model (SGLang 0.5.11's own Qwen3ForCausalLM, tiny random weights made here) at TP = 2 in
2 gloo processes on CPU, with the SGLang plugin on and off (sglang_model.py says what is the
test's own). The arfuse calls are the FAKE backend's (integration_fake.py); the GPU test
test_gpu_sglang_model.py runs the same with arfuse, eagerly and in CUDA graphs.

Prefill of 2 prompts, then STEPS decode steps. Plugin off: SGLang's own all-reduce and RMSNorm at
every layer boundary. Plugin on: the fused call at the layer boundaries of every decode step (the
counters say so), teacher-forced on the plugin-off tokens so that both runs see the same history:
every step's logits within LOGITS_TOL of the plugin-off ones, the same greedy token wherever the
plugin-off top-2 margin exceeds 2 * LOGITS_TOL, and bitwise equal across ranks. A second launch
(fresh processes, same settings) gives bitwise the same logits.
"""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the SGLang model tests need it")

from mp_util import run_ranks  # noqa: E402
from test_integration_sglang import engine_paths  # noqa: E402

STEPS = 8
LOGITS_TOL = 0.02  # relative to the largest |logit|: bf16 roundings of the residual stream, propagated


def model_worker(world, paths, backend, plugin, steps, forced, graphs, compile_backend=None):
    import sglang_model

    return sglang_model.run_launch(world, paths, backend, plugin, steps, forced, graphs, compile_backend)


def check_model(off, on, steps, tol=LOGITS_TOL):
    """What the CPU and the GPU runs must show, plugin-off `off` vs plugin-on `on` (per rank)."""
    import sglang_model

    for r in range(2):
        assert not off[r]["active"] and on[r]["active"], (off[r]["lines"], on[r]["lines"])
    info = [line for r in on for line in r["lines"] if line.startswith("arfuse INFO sglang")]
    assert len(info) == 1, info
    for r in range(2):
        assert on[r]["logits"] == on[0]["logits"], "plugin on: logits differ across ranks"
        assert off[r]["logits"] == off[0]["logits"], "plugin off: logits differ across ranks"
    lo, ln = torch.tensor(off[0]["logits"]), torch.tensor(on[0]["logits"])
    assert lo.shape == ln.shape == (steps, sglang_model.BATCH, sglang_model.VOCAB)
    worst = float((lo - ln).abs().max())
    scale = float(lo.abs().max())
    assert worst <= tol * scale, f"plugin-on logits differ from plugin-off by {worst} (> {tol} x {scale})"
    top2 = lo.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1]) > 2 * tol * scale
    assert torch.equal(lo.argmax(-1)[clear], ln.argmax(-1)[clear])
    assert off[0]["counters"] == {}, off[0]["counters"]  # the plugin off never served a call
    return worst / scale


@pytest.fixture(scope="module")
def paths():
    return engine_paths("0.5.11")


def test_sglang_model_plugin_on_equals_off_fake_backend(paths):
    off = run_ranks(model_worker, 2, (paths, "fake", False, STEPS, None, False), timeout=300)
    forced = off[0]["tokens"]
    on = run_ranks(model_worker, 2, (paths, "fake", True, STEPS, forced, False), timeout=300)
    worst = check_model(off, on, STEPS)
    # SGLang's Qwen3 fuses one boundary a layer (attention -> MLP: its MLP all-reduces by itself); the
    # prefill's BATCH * PROMPT = 10 tokens are above the decode size (8): the engine's own path
    assert on[0]["counters"] == {"sglang/tp/arfuse": __import__("sglang_model").LAYERS * STEPS}, on[0]["counters"]
    again = run_ranks(model_worker, 2, (paths, "fake", True, STEPS, forced, False), timeout=300)
    assert again[0]["logits"] == on[0]["logits"], "a second launch gave other logits"
    # the decode step under torch.compile (as --enable-torch-compile; aot_eager runs the fake
    # implementations while tracing): the same logits as eager, the fused op served every boundary
    compiled = run_ranks(model_worker, 2, (paths, "fake", True, STEPS, forced, False, "aot_eager"), timeout=300)
    check_model(off, compiled, STEPS)
    assert compiled[0]["logits"] == on[0]["logits"], "compiled decode differs from eager decode"
    assert compiled[0]["counters"] == on[0]["counters"], compiled[0]["counters"]
    print(f"sglang model: {STEPS} decode steps, worst |logit on - off| / max |logit| = {worst:.4g}")
