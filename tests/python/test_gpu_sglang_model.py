"""GPU: a whole model in SGLang 0.5.11's real modules with arfuse itself, 2 processes on GPU 0 (gloo
groups, as test_gpu_integration_sglang.py). The model, the batch and what is the test's own are in
sglang_model.py; test_sglang_model.py runs the same on the CPU with the FAKE backend.

  off         the plugin off, eager: SGLang's all-reduce (gloo) and RMSNorm at every boundary
  on          the plugin on, eager, teacher-forced on off's tokens: arfuse's fused kernel at every
              decode boundary (counters), logits within LOGITS_TOL of off's, bitwise equal across ranks
  on-graphs   the decode step captured once in a CUDA graph and replayed for every step (the engine's
              unfused all-reduces there are arfuse's plain all-reduce: gloo cannot be captured and
              NCCL refuses two ranks on one GPU); the same checks, and equal to `on` within a rounding
  compiled    the decode step under torch.compile (Inductor, as --enable-torch-compile), then captured;
              launched twice with the same TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR: the second
              launch (warm caches) gives bitwise the first one's logits
Skipped with the reason without a GPU, torch, the library's multi-process functions or SGLang's wheels.
"""
import os
import tempfile

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the SGLang model GPU test needs it")

from gpu_util import require_torch_multiprocess_gpu  # noqa: E402
from mp_util import run_ranks  # noqa: E402
from test_integration_sglang import engine_paths  # noqa: E402
from test_sglang_model import STEPS, check_model, model_worker  # noqa: E402

ENV = {"ARFUSE_TIMEOUT_MS": "20000"}


@pytest.fixture(autouse=True)
def _gpu(lib):
    require_torch_multiprocess_gpu(lib, torch)


def test_gpu_sglang_model_two_processes_one_gpu():
    import sglang_model

    paths = engine_paths("0.5.11")
    off = run_ranks(model_worker, 2, (paths, "arfuse", False, STEPS, None, False), timeout=600, env=ENV)
    forced = off[0]["tokens"]
    on = run_ranks(model_worker, 2, (paths, "arfuse", True, STEPS, forced, False), timeout=600, env=ENV)
    worst = {"on": check_model(off, on, STEPS)}
    assert on[0]["counters"] == {"sglang/tp/arfuse": sglang_model.LAYERS * STEPS}, on[0]["counters"]
    graphs = run_ranks(model_worker, 2, (paths, "arfuse", True, STEPS, forced, True), timeout=600, env=ENV)
    worst["on-graphs"] = check_model(off, graphs, STEPS)
    # a captured call counts once, at capture: the warm-up before it and the capture
    assert graphs[0]["counters"] == {"sglang/tp/arfuse": 2 * sglang_model.LAYERS}, graphs[0]["counters"]
    caches = tempfile.mkdtemp(prefix="arfuse-sglang-model-caches-")
    env = {**ENV, "TORCHINDUCTOR_CACHE_DIR": os.path.join(caches, "inductor"),
           "TRITON_CACHE_DIR": os.path.join(caches, "triton")}
    first = run_ranks(model_worker, 2, (paths, "arfuse", True, STEPS, forced, True, "inductor"), timeout=900, env=env)
    worst["compiled"] = check_model(off, first, STEPS)
    second = run_ranks(model_worker, 2, (paths, "arfuse", True, STEPS, forced, True, "inductor"), timeout=900, env=env)
    assert second[0]["logits"] == first[0]["logits"], "the second launch (warm caches) gave other logits"
    print("arfuse SGLang model on GPU: worst |logit on - off| / max |logit|:", worst, "lines:",
          sorted({line for r in on for line in r["lines"]}))
