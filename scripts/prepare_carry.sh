#!/usr/bin/env bash
# Fills .carry/ (gitignored) with what a GPU machine of the device tool lacks, so that one call of
# scripts/gpu_check.sh can build and test there (name `.carry` in the call's carry list):
#   .carry/googletest   GoogleTest's sources (Debian's /usr/src/googletest; tests/CMakeLists.txt finds it)
#   .carry/re2          RE2's headers and static library (Debian's libre2-dev 20220601: no Abseil needed)
#   .carry/nccl/include nccl.h of this machine's NCCL (the GPU machine has the library as a wheel)
#   .carry/baseline     with --baseline REV: that revision's tree, built beside this one by
#                       `gpu_check.sh --proxy` / `--perf33` for before/after figures from one call
#                       (documentation, fixtures and results are left out: they only add bytes)
# Usage: bash scripts/prepare_carry.sh [--baseline REV]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
c=$root/.carry
mkdir -p "$c"
baseline=""
while [ $# -gt 0 ]; do
  case "$1" in
    --baseline) baseline=${2:?--baseline needs a git revision}; shift 2 ;;
    --baseline=*) baseline=${1#--baseline=}; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "prepare_carry: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
src_gtest=/usr/src/googletest
[ -f "$src_gtest/CMakeLists.txt" ] || { echo "prepare_carry: no $src_gtest: apt-get install libgtest-dev" >&2; exit 1; }
rm -rf "$c/googletest" && cp -r "$src_gtest" "$c/googletest"
re2_lib=$(ls /usr/lib/*/libre2.a /usr/lib/libre2.a 2>/dev/null | head -1 || true)
[ -n "$re2_lib" ] && [ -f /usr/include/re2/re2.h ] || { echo "prepare_carry: no libre2.a: apt-get install libre2-dev" >&2; exit 1; }
rm -rf "$c/re2" && mkdir -p "$c/re2/include" "$c/re2/lib"
cp -r /usr/include/re2 "$c/re2/include/" && cp "$re2_lib" "$c/re2/lib/"
nccl_h=""
for d in ${NCCL_ROOT:+"$NCCL_ROOT/include"} /usr/local/cuda/include /usr/include /usr/local/include; do
  [ -f "$d/nccl.h" ] && { nccl_h=$d/nccl.h; break; }
done
[ -n "$nccl_h" ] || { echo "prepare_carry: no nccl.h found (set NCCL_ROOT)" >&2; exit 1; }
mkdir -p "$c/nccl/include" && cp "$nccl_h" "$c/nccl/include/"
if [ -n "$baseline" ]; then
  rev=$(git -C "$root" rev-parse --verify "$baseline^{commit}")
  rm -rf "$c/baseline" && mkdir -p "$c/baseline"
  git -C "$root" archive "$rev" -- . ':!bench/results' ':!tests/triage' ':!docs' | tar -x -C "$c/baseline"
  echo "$rev" > "$c/baseline/.baseline_rev"
fi
echo "prepare_carry: $(du -sh "$c" | cut -f1) in $c ($(ls "$c" | tr '\n' ' '))"
