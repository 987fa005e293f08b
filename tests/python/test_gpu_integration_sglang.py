"""GPU: the SGLang plugin with arfuse itself inside the REAL SGLang 0.5.11 modules, 2 processes on GPU 0
(gloo process groups; processes on one GPU time-slice, so shapes are small and the device timeout is
20 s). The worker is test_integration_sglang.engine_worker with the real backend: SGLang's own
load_plugins() and HookRegistry, the patched ModelRunner setup making arfuse communicators over the
engine's GroupCoordinator, RMSNorm.forward_with_allreduce_fusion eagerly at 1..8 tokens (arfuse's
kernel) and at 13 tokens (the group's own all-reduce + arfuse's add+RMSNorm: never (None, None) on
0.5.11), then captured in a CUDA graph and replayed on new inputs, each against the engine's own
unfused ops (GroupCoordinator.all_reduce + RMSNorm.forward_native) and bitwise-equal across ranks.

Needs the wheels of scripts/fetch_engine_wheels.sh in .whl/ (CPython 3.12) or ARFUSE_SGLANG_SITE;
skipped with the reason without a GPU, without torch, without the library's multi-process functions
or without SGLang. sgl_kernel (326 MB) is not brought: a labelled absent module stands in for it and
raises if anything calls it.
"""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the SGLang GPU test needs it")

from gpu_util import require_torch_multiprocess_gpu  # noqa: E402
from mp_util import run_ranks  # noqa: E402
from test_integration_sglang import check, engine_paths, engine_worker  # noqa: E402


@pytest.fixture(autouse=True)
def _gpu(lib):
    require_torch_multiprocess_gpu(lib, torch)


def test_gpu_sglang_0_5_11_two_processes_one_gpu():
    paths = engine_paths()
    results = run_ranks(engine_worker, 2, (paths, "arfuse"), timeout=600, env={"ARFUSE_TIMEOUT_MS": "20000"})
    check(results, 2, "arfuse")
    print("arfuse GPU integration:", [line for r in results for line in r["lines"]], results[0]["counters"])
