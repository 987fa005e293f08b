#!/usr/bin/env bash
# A configure without the CUDA toolkit's nvcc (the laptop or log host of the person on call) builds
# `arfuse triage`, `plan` and `env`, says in one line what it left out, and the tool links nothing
# of CUDA or NCCL. nvcc is hidden from the configure: its folders leave PATH, CUDA_PATH & co. are
# unset, and where the configure would still find one (a /usr/local/bin/nvcc link, a Debian
# /usr/bin/nvcc, /usr/local/cuda/bin/nvcc) CUDACXX names a compiler that does not exist, which is
# how CMake sees a machine whose nvcc is missing or broken: check_language(CUDA) reports none.
# Usage: configure_without_cuda.sh SOURCE_DIR BUILD_DIR [CMAKE [GENERATOR [CXX_LAUNCHER]]]
set -uo pipefail
src=$1 build=$2 cmake=${3:-cmake} gen=${4:-Ninja} launcher=${5:-}
die() {
  echo "FAIL: $*"
  exit 1
}

path=""
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  [ -n "$d" ] && [ ! -e "$d/nvcc" ] && path="${path:+$path:}$d"
done
hide=()
for d in /usr/local/bin /usr/bin /bin /usr/local/cuda/bin; do
  if [ -e "$d/nvcc" ]; then
    echo "note: $d/nvcc is where the configure looks even without PATH: CUDACXX names a missing compiler instead"
    hide=(CUDACXX=/nonexistent/nvcc)
    break
  fi
done
rm -rf "$build"
launch=()
[ -n "$launcher" ] && launch=(-DCMAKE_C_COMPILER_LAUNCHER="$launcher" -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher")
out=$(env -u CUDACXX -u CUDA_PATH -u CUDA_HOME -u CUDAToolkit_ROOT PATH="$path" "${hide[@]}" \
  "$cmake" -S "$src" -B "$build" -G "$gen" "${launch[@]}" 2>&1) || {
  printf '%s\n' "$out"
  die "the configure without nvcc failed"
}
line=$(grep -E "^-- arfuse: no CUDA compiler" <<<"$out")
[ "$(grep -c . <<<"$line")" -eq 1 ] || {
  printf '%s\n' "$out"
  die "the configure did not say in one line what it left out"
}
echo "configure: ${line#-- }"
grep -q "left out: libarfuse, selftest, bench, doctor" <<<"$line" || die "the line does not name what was left out"
if grep -qE "^(CUDAToolkit_|NCCL_LIBRARY|NCCL_INCLUDE_DIR)[A-Za-z_]*:" "$build/CMakeCache.txt"; then
  die "the configure without nvcc still looked for the CUDA toolkit or NCCL"
fi

env PATH="$path" "$cmake" --build "$build" --target arfuse_cli -j2 >"$build/build.log" 2>&1 || {
  tail -30 "$build/build.log"
  die "building arfuse without CUDA failed"
}
bin=$build/bin/arfuse
needed=$(readelf -d "$bin" 2>/dev/null | grep NEEDED || objdump -p "$bin" | grep NEEDED)
if grep -qiE "cuda|nccl|arfuse" <<<"$needed"; then
  printf '%s\n' "$needed"
  die "bin/arfuse without CUDA still needs a CUDA, NCCL or arfuse library"
fi
echo "ok: bin/arfuse built without nvcc; it needs $(grep -oE '\[[^]]+\]' <<<"$needed" | tr -d '[]' | paste -sd' ')"

arfuse=$bin
. "$src/tests/cpu/expect.sh"
expect 0 "^VERDICT: ranks made different arfuse calls" triage "$src/tests/triage/fixtures/arfuse_divergent_call.log"
expect 0 "^1 +14336 +lowlatency" plan --ranks=4 --tokens=1
expect 0 "^ARFUSE_ALGO " env
expect 0 "built without CUDA" version
for cmd in selftest bench doctor; do
  expect 3 "^arfuse $cmd: this arfuse was built without CUDA" $cmd
done
exit $fail
