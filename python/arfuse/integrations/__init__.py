"""Engine plugins: arfuse as the fused all-reduce + residual add + RMSNorm of SGLang and vLLM.

    arfuse.integrations.sglang   entry point of the `sglang.srt.plugins` group, active with ARFUSE_SGLANG=1
    arfuse.integrations.vllm     entry point of the `vllm.general_plugins` group, active with ARFUSE_VLLM=1

Both are registered by `pip install ./python` and do nothing unless their variable is set; when set,
a group arfuse cannot serve is left to the engine as it was, with one WARN line naming the reason
(docs/integrations.md). Importing this package imports neither torch nor an engine.
"""
from typing import Dict, Tuple

__all__ = ["counters"]


def counters() -> Dict[Tuple[str, str, str], int]:
    """Fused layer-boundary calls per (engine, group, path) since the process started; path is
    "arfuse" (the fused kernel), "engine-all-reduce" (the group's own all-reduce, then arfuse's
    add+RMSNorm: a call arfuse could not serve on an engine version where declining is unsafe) or
    "declined" (handed back to the engine's own path). A call captured in a CUDA graph counts once,
    at capture."""
    from ._glue import counters as _counters

    return _counters()
