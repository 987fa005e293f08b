#!/usr/bin/env bash
# Prepares FlashInfer for bench/peers.py on the GPU machines, which have torch, triton, NCCL and nvcc
# but no network and no FlashInfer, and take at most 64 MiB of files per call (the repo included).
#
#   bash scripts/fetch_peer_wheels.sh [--prebuild]
#
# flashinfer-python is a 62 MB pure-Python wheel (420 MB unpacked) that JIT-compiles its kernels with
# nvcc; its __init__ imports every module, and those need packages the machines lack (cuda-tile,
# nccl4py, nvidia-cutlass-dsl, cudnn-frontend). The two peers need little of it:
#   flashinfer.norm.fused_add_rmsnorm        CUDA JIT module `norm` (csrc/norm.cu + binding), with
#                                            FLASHINFER_USE_CUDA_NORM=1 (the default CuTe-DSL backend
#                                            needs nvidia-cutlass-dsl)
#   flashinfer.comm.trtllm_allreduce_fusion  CUDA JIT module `trtllm_comm` (3 csrc/trtllm_*.cu)
# So this keeps every .py file of the package (imports inside functions are not knowable statically;
# all of them compress to ~14 MB), replaces the __init__ of flashinfer, flashinfer.comm and
# flashinfer.jit by ones that import nothing, and keeps of data/ only the five .cu sources and the
# headers nvcc says they include (nvcc -M; ~1,000 files, 1.5 MB compressed), plus apache-tvm-ffi (the
# JIT modules' runtime, a 3.3 MB cp312 wheel). Everything else (pynvml, filelock, jinja2, ninja, numpy,
# cuda-bindings, ...) is already on the GPU machines (KINDS.md's package list).
#
# Output (gitignored): .carry/peers/flashinfer-trim.tar.gz and .carry/peers/apache_tvm_ffi-*.whl.
# On the GPU machine, name `.carry/peers` in the run's carry and start the command with
#   bash scripts/fetch_peer_wheels.sh --unpack
# which unpacks both into .carry/peers-site (bench/peers.py finds it there) and keeps FlashInfer's JIT
# cache in .carry/peers-jit (kept on a warm machine between calls).
#
# --prebuild: also compile the two JIT modules here with nvcc for sm_90a (H100/H200), with the flags
# FlashInfer's JIT uses, into flashinfer/data/aot/<module>/<module>.so inside the tarball: FlashInfer
# loads such AOT modules without compiling, and falls back to its JIT if one does not load. It also
# proves that the trimmed headers are complete. The tarball grows to ~21 MB (24 MB to carry in all).
# CPU time: norm ~4 min, trtllm_comm (trtllm_allreduce_fusion.cu above all) ~48 min on 2 busy cores;
# the same JIT on a GPU machine would spend minutes of device time, which is why this exists.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/.carry/peers
FI_VERSION=${FI_VERSION:-0.7.2.post1}
TVM_VERSION=${TVM_VERSION:-0.1.15.post2}
SOURCES="norm.cu flashinfer_norm_binding.cu trtllm_allreduce.cu trtllm_allreduce_fusion.cu trtllm_moe_allreduce_fusion.cu"
prebuild=0
unpack=0
for a in "$@"; do
  case "$a" in
    --prebuild) prebuild=1 ;;
    --unpack) unpack=1 ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "fetch_peer_wheels.sh: unknown argument $a (use --prebuild, --unpack or --help)" >&2; exit 2 ;;
  esac
done

if [ $unpack = 1 ]; then  # on the GPU machine
  tgz=$(ls "$out"/flashinfer-trim.tar.gz 2>/dev/null) || { echo "no $out/flashinfer-trim.tar.gz: run this script without --unpack where PyPI is reachable, and carry .carry/peers" >&2; exit 1; }
  rm -rf "$root/.carry/peers-site" && mkdir -p "$root/.carry/peers-site" "$root/.carry/peers-jit"
  tar xzf "$tgz" -C "$root/.carry/peers-site"
  python3 -m zipfile -e "$(ls "$out"/apache_tvm_ffi-*.whl | head -1)" "$root/.carry/peers-site"  # a wheel is a zip of site-packages
  echo "peers: FlashInfer $FI_VERSION (trimmed) and apache-tvm-ffi in $root/.carry/peers-site"
  exit 0
fi

dl=$(mktemp -d /tmp/arfuse-peer-wheels.XXXXXX)
work=$(mktemp -d /tmp/arfuse-peer-trim.XXXXXX)
trap 'rm -rf "$dl" "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any -d "$dl" \
  "flashinfer-python==$FI_VERSION" "apache-tvm-ffi==$TVM_VERSION"
mkdir -p "$out" "$work/whl" "$work/tvm" "$work/trim"
rm -f "$out"/flashinfer-trim.tar.gz "$out"/apache_tvm_ffi-*.whl
cp "$dl"/apache_tvm_ffi-*.whl "$out/"
python3 -m zipfile -e "$dl"/flashinfer_python-*.whl "$work/whl"
python3 -m zipfile -e "$dl"/apache_tvm_ffi-*.whl "$work/tvm"
fi=$work/whl/flashinfer
data=$fi/data

# Every .py outside data/, then the stub __init__s.
(cd "$work/whl" && find flashinfer -name '*.py' -not -path 'flashinfer/data/*' | cpio -pdm --quiet "$work/trim")
cat > "$work/trim/flashinfer/__init__.py" <<EOF
"""FlashInfer $FI_VERSION, trimmed for arfuse's bench/peers.py by scripts/fetch_peer_wheels.sh: the
full __init__ imports every module (and packages these machines lack); import the modules you use,
e.g. flashinfer.norm and flashinfer.comm.trtllm_ar. Data: only the sources of the norm and
trtllm_comm JIT modules and the headers they include."""
from .version import __version__ as __version__
EOF
printf '"""Trimmed (scripts/fetch_peer_wheels.sh): import flashinfer.comm.trtllm_ar directly."""\n' > "$work/trim/flashinfer/comm/__init__.py"
printf '"""Trimmed (scripts/fetch_peer_wheels.sh): import flashinfer.jit.<module> directly."""\n' > "$work/trim/flashinfer/jit/__init__.py"

# The JIT sources and, by nvcc -M (FlashInfer's include order), every header they include.
incs=(-I"$data/cccl/cub" -I"$data/cccl/libcudacxx/include" -I"$data/cccl/thrust" -isystem "$work/tvm/tvm_ffi/include"
      -isystem "$data/include" -isystem "$data/cutlass/include" -isystem "$data/cutlass/tools/util/include"
      -isystem "$data/spdlog/include")
nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
mkdir -p "$work/trim/flashinfer/data/csrc"
for s in $SOURCES tvm_ffi_utils.h; do cp "$data/csrc/$s" "$work/trim/flashinfer/data/csrc/"; done
if [ -x "$nvcc_bin" ]; then
  for s in $SOURCES; do
    "$nvcc_bin" -std=c++17 -M -x cu -arch=sm_90a -DENABLE_BF16 -DENABLE_FP8 -DFLASHINFER_ENABLE_BF16 \
      -DFLASHINFER_ENABLE_F16 -DFLASHINFER_ENABLE_FP8_E4M3 -DFLASHINFER_ENABLE_FP8_E5M2 "${incs[@]}" \
      "$data/csrc/$s" -o "$work/$s.d" 2>/dev/null
  done
  cat "$work"/*.d | tr ' \\' '\n\n' | grep "^$data/" | xargs -r realpath | sort -u | grep "^$data/" |
    sed "s#^$work/whl/##" > "$work/headers.txt"
  (cd "$work/whl" && cpio -pdmu --quiet "$work/trim" < "$work/headers.txt")
  echo "headers: $(wc -l < "$work/headers.txt") files that the JIT sources include (nvcc -M)"
else
  echo "nvcc not found: keeping FlashInfer's whole include, cccl and spdlog folders (larger)"
  (cd "$work/whl" && find flashinfer/data/include flashinfer/data/cccl flashinfer/data/spdlog -type f |
    cpio -pdm --quiet "$work/trim")
fi

if [ $prebuild = 1 ]; then
  # FlashInfer's JIT flags (jit/core.py gen_jit_spec, jit/cpp_ext.py) for TARGET_CUDA_ARCHS = {9.0a}.
  t=$work/trim/flashinfer/data
  cuda_home=$(dirname "$(dirname "$(readlink -f "$nvcc_bin")")")
  common=(-DPy_LIMITED_API=0x03090000 -D_GLIBCXX_USE_CXX11_ABI=1 -I"$t/cccl/cub" -I"$t/cccl/libcudacxx/include"
          -I"$t/cccl/thrust" -isystem "$cuda_home/include" -isystem "$work/tvm/tvm_ffi/include"
          -isystem "$t/include" -isystem "$t/cutlass/include" -isystem "$t/cutlass/tools/util/include"
          -isystem "$t/spdlog/include")
  cuda=(-std=c++17 --threads 2 -use_fast_math -DFLASHINFER_ENABLE_F16 -DFLASHINFER_ENABLE_BF16
        -DFLASHINFER_ENABLE_FP8_E4M3 -DFLASHINFER_ENABLE_FP8_E5M2 -DNDEBUG -O3 "${common[@]}"
        --compiler-options=-fPIC --expt-relaxed-constexpr -static-global-template-stub=false
        -gencode=arch=compute_90a,code=sm_90a -DFLASHINFER_ENABLE_FP8_E8M0 -DFLASHINFER_ENABLE_FP4_E2M1)
  build() {  # build MODULE EXTRA_FLAGS... -- SOURCES...
    local m=$1; shift; local extra=(); while [ "$1" != -- ]; do extra+=("$1"); shift; done; shift
    local objs=() d=$t/aot/$m; mkdir -p "$d"
    local t0=$(date +%s)
    for s in "$@"; do
      "$nvcc_bin" "${cuda[@]}" "${extra[@]}" -c "$t/csrc/$s" -o "$work/$m-${s%.cu}.o"
      objs+=("$work/$m-${s%.cu}.o")
    done
    c++ "${objs[@]}" -shared -L"$cuda_home/lib64" -L"$cuda_home/lib64/stubs" -lcudart -lcuda -o "$d/$m.so"
    echo "prebuilt $m for sm_90a in $(( $(date +%s) - t0 )) s: $(du -h "$d/$m.so" | cut -f1)"
  }
  build norm -DENABLE_BF16 -DENABLE_FP8 -- norm.cu flashinfer_norm_binding.cu
  build trtllm_comm -- trtllm_allreduce.cu trtllm_allreduce_fusion.cu trtllm_moe_allreduce_fusion.cu
fi

tar czf "$out/flashinfer-trim.tar.gz" -C "$work/trim" flashinfer
echo "peers: $(du -h "$out/flashinfer-trim.tar.gz" | cut -f1) flashinfer-trim.tar.gz ($(cd "$work/trim" && find flashinfer -type f | wc -l) files, $(du -sh "$work/trim" | cut -f1) unpacked) + $(du -h "$out"/apache_tvm_ffi-*.whl | cut -f1) apache-tvm-ffi wheel in $out"
echo "total to carry: $(du -ch "$out"/flashinfer-trim.tar.gz "$out"/apache_tvm_ffi-*.whl | tail -1 | cut -f1) (a call carries at most 64 MiB with the repo)"
