#!/usr/bin/env bash
# Builds the libFuzzer targets (clang) and fuzzes each for a bounded time, two at a time.
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]      (default 60 s; every target)
# CI runs it with 40 s (.ci/run); run it longer locally (fuzz/run.sh 3600). New inputs that add
# coverage go to $FUZZ_WORK/corpus/<target> (not the committed seeds); a crash or a timeout leaves
# its input in $FUZZ_WORK/findings/<target>/ and the script exits 1: copy the input into
# fuzz/regressions/<target>/, fix the bug, and the replay test keeps it fixed (docs/fuzzing.md).
# Environment: FUZZ_BUILD (build directory, default build-fuzz), FUZZ_WORK (default $FUZZ_BUILD/work),
# FUZZ_JOBS (targets run at once, default 2), CC/CXX (default clang/clang++).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(json triage_input rendezvous params)
build=${FUZZ_BUILD:-$root/build-fuzz}
work=${FUZZ_WORK:-$build/work}
jobs=${FUZZ_JOBS:-2}

launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
t0=$(date +%s)
mkdir -p "$build"
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=${CC:-clang} CXX=${CXX:-clang++} cmake -S "$here" -B "$build" "${gen[@]}" "${launcher[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build/configure.log" 2>&1 ||
    { cat "$build/configure.log"; echo "fuzz: configure failed"; exit 2; }
fi
cmake --build "$build" -j"$jobs" >"$build/build.log" 2>&1 || { tail -40 "$build/build.log"; echo "fuzz: build failed"; exit 2; }
echo "fuzz: built ${targets[*]} in $(( $(date +%s) - t0 )) s; fuzzing each for $seconds s, $jobs at a time"

run_one() {
  local t=$1
  local corpus=$work/corpus/$t findings=$work/findings/$t
  mkdir -p "$corpus" "$findings"
  local dict=()
  [ -f "$here/dict/$t.dict" ] && dict=(-dict="$here/dict/$t.dict")
  # The committed seeds and regressions, where the target has any (git keeps no empty folder, and
  # libFuzzer exits at a corpus folder that does not exist).
  local seeds=()
  for d in "$here/corpus/$t" "$here/regressions/$t"; do [ -d "$d" ] && seeds+=("$d"); done
  # -timeout: an input that runs 10 s is a finding (a hang), as is one over 2 GB of memory.
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$findings/" "${dict[@]}" \
    "$corpus" "${seeds[@]}" >"$work/$t.log" 2>&1
  local rc=$?
  local execs
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log" | tail -1)
  local cov
  cov=$(grep -o 'cov: [0-9]*' "$work/$t.log" | tail -1)
  if [ $rc -eq 0 ]; then
    echo "fuzz: $t: ok (${execs:-?} inputs, ${cov:-cov: ?})"
  else
    echo "fuzz: $t: FOUND something (exit $rc); input(s) in $findings:"
    ls "$findings" | sed 's/^/  /'
    grep -m3 -E "ERROR: |SUMMARY: |runtime error" "$work/$t.log" | sed 's/^/  /'
  fi
  return $rc
}

mkdir -p "$work"
status=0
pids=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
echo "fuzz: done in $(( $(date +%s) - t0 )) s$([ $status -ne 0 ] && echo ': FINDINGS above')"
exit $status
