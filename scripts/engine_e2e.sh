#!/usr/bin/env bash
# arfuse's engine plugins inside real servers at TP = every GPU (needs >= 2 GPUs, SGLang and/or vLLM
# installed, libarfuse.so built): python -m sglang.launch_server and vllm serve on a tiny model this
# script generates, plugin on/off, CUDA graphs on/off, a warm restart; greedy outputs compared, the
# arfuse INFO line and counters read, decode tokens/s side by side in OUT/engine_e2e.json.
# docs/integrations.md ("End to end") says what each verdict means.
#
#   bash scripts/engine_e2e.sh [--engines sglang,vllm] [--out DIR] [--prompts N] [--max-new-tokens N] ...
#   (python3 scripts/engine_e2e.py --help lists every option)
# Exit: 0 every verdict holds, 1 one does not, 2 bad arguments, 3 fewer than 2 GPUs.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
for a in "$@"; do
  if [ "$a" = "-h" ] || [ "$a" = "--help" ]; then exec python3 "$root/scripts/engine_e2e.py" --help; fi
done
python3 "$root/scripts/engine_e2e.py" --check-args "$@" || exit 2
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -lt 2 ]; then
  echo "engine_e2e: needs >= 2 GPUs (found ${ngpu:-0}): the servers run at TP = every GPU" >&2
  exit 3
fi
lib=${ARFUSE_LIBRARY_PATH:-$root/build/src/libarfuse.so}
[ -f "$lib" ] || lib=$root/build-gpu/src/libarfuse.so
if [ ! -f "$lib" ]; then
  echo "engine_e2e: libarfuse.so not found: build it (cmake --build build) or set ARFUSE_LIBRARY_PATH" >&2
  exit 2
fi
export ARFUSE_LIBRARY_PATH=$lib PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
export ENGINE_E2E_NGPU=$ngpu NCCL_NVLS_ENABLE=0
exec python3 "$root/scripts/engine_e2e.py" "$@"
