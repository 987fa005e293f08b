#!/usr/bin/env bash
# Downloads into .whl/ exactly the wheels tests/python/test_gpu_integration_sglang.py needs on a GPU
# machine that has torch 2.11 (with its own dependencies: sympy, networkx, jinja2, filelock, fsspec,
# typing-extensions), triton and numpy, and nothing else, and cannot reach a package registry:
# SGLang 0.5.11 (it pins torch==2.11.0, and it is a version with the (None, None) trap) and what
# importing its plugin system, layernorm, flashinfer_comm_fusion, communicator, parallel_state and
# model_runner needs beyond that machine's packages, found by importing them with only torch, triton
# and numpy on the path. CPython 3.12, manylinux x86_64, --no-deps, pinned: 48 wheels, 39.3 MB (37.5 MiB),
# so that with the repository the tree shipped to a GPU machine stays within its 64 MiB.
# sglang-kernel (326 MB) is not among them, nor torchvision and pillow (14 MiB; sglang.srt.utils.common
# imports decode_jpeg and Image, used for image inputs only): the tests stand labelled absent-modules in
# for them (anything called from one raises) and compute their references with SGLang's forward_native.
# tests/python/test_gpu_sglang_model.py (a whole Qwen3 model) needs nothing more.
#
# --sglang 0.5.23 downloads instead, into .whl-sglang-0.5.23/ (apart from .whl/: the GPU test's set
# stays as it is), what tests/python/test_integration_sglang.py needs for SGLang 0.5.23 (decline-safe)
# on CPU: the same list (torchvision and pillow included) with sglang 0.5.23, its pins transformers 5.19.0 and tokenizers 0.23.2 (the
# range transformers checks at import), and apache-tvm-ffi 0.1.11 (its pin, imported on CPU too),
# found the same way (with torch 2.11; 0.5.23 pins 2.14.1, which the test does not need): 51 wheels,
# 90.8 MB (86.5 MiB).
#
# Run on a machine with the registry: bash scripts/fetch_engine_wheels.sh [--sglang 0.5.23] [DEST]
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.5.11
if [[ "${1:-}" == "--sglang" ]]; then
  version="${2:?--sglang needs a version: 0.5.11 or 0.5.23}"
  shift 2
fi
case "$version" in
  0.5.11) default_dest=.whl
          engine=(sglang==0.5.11 transformers==5.6.0 tokenizers==0.22.2)
          images=() ;;
  0.5.23) default_dest=.whl-sglang-0.5.23
          engine=(sglang==0.5.23 transformers==5.19.0 tokenizers==0.23.2 apache-tvm-ffi==0.1.11)
          images=(torchvision==0.26.0 pillow==13.0.0) ;;
  *) echo "fetch_engine_wheels: --sglang $version: the tests know 0.5.11 and 0.5.23" >&2; exit 2 ;;
esac
dest="${1:-$default_dest}"
mkdir -p "$dest"

wheels=(
  "${engine[@]}"
  # sglang's own imports
  aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 frozenlist==1.8.0 multidict==7.2.1 propcache==0.5.4
  yarl==1.25.1 attrs==26.1.0 anyio==4.16.0 sniffio==1.3.1 idna==3.20 starlette==1.10.0 pyzmq==27.3.0
  msgspec==0.23.0 orjson==3.13.0 pybase64==1.5.1 psutil==7.2.2 packaging==26.4 "${images[@]}"
  tqdm==4.70.1 dill==0.4.1 partial_json_parser==0.2.1.1.post7 sentencepiece==0.2.3
  openai==3.57.0 httpx==0.28.1 httpx2==2.16.2 httpcore==1.0.9 h11==0.16.0 certifi==2026.10.19.post1
  requests==2.34.2 urllib3==2.8.0 pydantic==2.14.4 pydantic_core==2.50.5 annotated_types==0.8.0
  typing_inspection==0.4.5 ipython==9.18.1 traitlets==5.16.1 pygments==2.21.0 compressed-tensors==0.20.1 loguru==0.7.3
  gguf==0.19.0 einops==0.8.2
  # transformers (above: the engine's pin) and what it checks at import
  huggingface_hub==1.33.0 safetensors==0.8.0 regex==2026.11.19 pyyaml==6.0.4
)
python3 -m pip download -q --no-deps --disable-pip-version-check --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dest" "${wheels[@]}"
# an older fetch of the GPU set held the image wheels: they would only weigh on the shipped tree
[ ${#images[@]} = 0 ] && rm -f "$dest"/torchvision-*.whl "$dest"/pillow-*.whl
n=$(ls "$dest"/*.whl | wc -l)
echo "fetch_engine_wheels: sglang $version: $n wheels, $(du -ch "$dest"/*.whl | tail -1 | cut -f1) in $dest"
