#!/usr/bin/env bash
# Collective init is all-or-nothing even when a rank fails before anything is shared: three
# worker processes without a visible GPU must all return the same error (naming rank 0's failure)
# within the bound, and leave nothing in /dev/shm. Runs on CPU-only machines (CUDA_VISIBLE_DEVICES
# is emptied so that it also holds on GPU machines).
set -u
arfuse=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export CUDA_VISIBLE_DEVICES=
for r in 0 1 2; do
  timeout 60 "$arfuse" selftest --procs 3 --proc-rank $r --proc-dir "$dir" > "$dir/r$r" 2>&1 &
done
wait
fail=0
for r in 0 1 2; do
  line=$(grep "FAIL init" "$dir/r$r")
  echo "rank $r: $line"
  case "$line" in
    *"(rank $r of 3): rank 0: no CUDA device is visible to this process"*) ;;
    *) echo "rank $r: expected the shared error naming rank 0"; fail=1 ;;
  esac
done
if ls /dev/shm 2>/dev/null | grep -q '^arfuse-'; then echo "a /dev/shm/arfuse-* segment exists"; fi
exit $fail
