#!/usr/bin/env python3
"""What arfuse's engine plugins would do with the engines installed in this Python, without starting
one: for SGLang, the targets the plugin found (op, gate, pre-capture setup) and whether a declined
call is safe on this version; for vLLM, whether the pass manager exposes the pass it replaces. Then
the commands that turn them on (docs/integrations.md). Needs no GPU; imports the engines' modules.

    python examples/engine_plugins.py
"""
import importlib.util
import sys


def main() -> int:
    found = False
    if importlib.util.find_spec("sglang") is not None:
        found = True
        from arfuse.integrations import sglang

        shape = sglang.probe()
        print(f"SGLang {sglang._version()}:")
        if shape.missing:
            print("  unknown shape, the plugin would patch nothing; missing:")
            for m in shape.missing:
                print(f"    {m}")
        else:
            print(f"  op     {shape.op}\n  gate   {shape.gate}\n  setup  {shape.setup}")
            print("  a call arfuse cannot serve is " + ("handed back to SGLang, which all-reduces itself"
                                                        if shape.decline_safe else
                                                        "run as the group's all-reduce + arfuse's add+RMSNorm "
                                                        "(declining would skip the all-reduce here)"))
        print("  on: ARFUSE_SGLANG=1 python -m sglang.launch_server --model-path MODEL --tp N")
    if importlib.util.find_spec("vllm") is not None:
        found = True
        from arfuse.integrations import vllm

        try:
            pm = importlib.import_module(vllm.PASS_MANAGER)
            has = hasattr(pm, vllm.PASS_NAME)
        except Exception as e:  # noqa: BLE001
            has, why = False, f"{type(e).__name__}: {e}"
        else:
            why = "not a CUDA platform here, or an unknown vLLM"
        print("vLLM: " + (f"{vllm.PASS_MANAGER}.{vllm.PASS_NAME} found, the plugin would replace it" if has
                          else f"the pass to replace is not there ({why})"))
        print("  on: ARFUSE_VLLM=1 vllm serve MODEL -tp N -cc.pass_config.fuse_allreduce_rms=True")
    if not found:
        print("neither SGLang nor vLLM is installed in this Python")
    return 0


if __name__ == "__main__":
    sys.exit(main())
