#!/usr/bin/env bash
# One call on a GPU machine: build for this GPU only (Release, parallel), prove the kernels are not
# empty, run every GPU test (virtual ranks; real ranks when >= 2 GPUs), `arfuse selftest`, and short
# benchmarks; $OUT (default ./out) ends up holding summary.txt and logs.tgz (every log and JSON).
#
#   OUT=/tmp/out bash scripts/gpu_check.sh [--quick] [--tests-only | --bench-only]
#   --quick       accepted for compatibility (the selftest always runs --quick: the suites cover the rest)
#   GPU_CHECK_BUDGET_S (default 570): the whole run's time budget; later steps are skipped, and say so
#   GPU_CHECK_REPEAT_KILLED=N: the killed-rank tests across hosts N more times (ctest --repeat until-fail)
#   --tests-only  the test suites, selftests, sanitizers and the Python tests; no benchmarks or doctor
#   --bench-only  benchmarks, doctor and calibration; no test suites (a warm machine's second call)
#   --proxy       first the virtual-rank proxy table (issue 17): fused, 2/4/8 ranks on GPU 0, every
#                 forced path at 1/4/16/64 tokens (JSON proxy_tp*.json), the low-latency two-phase
#                 variant forced at 1/4/16/32 (proxy_ll2_tp*.json), and -- when .carry/baseline
#                 holds an older tree (git archive REV | tar -x -C .carry/baseline) -- the same table
#                 from that tree, built beside this one (baseline_tp*.json): before/after in one run
#   --large       with --proxy: also auto, one-shot and two-shot at 64/256/1024/2048 tokens on 2/4/8
#                 virtual ranks, from both trees (proxy_large_tp*.json, baseline_large_tp*.json)
#   --smoke       right after the build: selftest --quick, the fault matrix and batch invariance,
#                 then everything else as time allows
#   --experiments with --proxy: the 1- and 16-token proxy rows again with PDL off, rows never split
#                 (ARFUSE_MAX_CHUNKS=1), a polling back-off (ARFUSE_POLL_SLEEP_NS=100), the flight
#                 recorder off and the deterministic mode, to attribute the time (exp_*.json);
#                 GPU_CHECK_EXPERIMENTS="noflight determ" picks some of them
#   --phases      attribution: a second tree built with -DARFUSE_PHASE_TIMING=ON (CLI only), whose
#                 kernels print clock64() stamps of their phases; low-latency at 1 token, one-shot at 16
#                 and two-shot at 64 on 2/4/8 virtual ranks, summarised by scripts/phase_report.py
#                 (phases_tp*.json), next to the same runs of the normal build (PROXY figures)
#   --calibrated-proxy  the auto plan once calibrated on virtual ranks: doctor --calibrate over
#                 2/4/8 virtual ranks, then auto (with that file) beside every forced path at 1..2048
#                 tokens (proxy_calibrated_tp*.json): whether auto follows the measured best path
#   --perf33      issue 33's before/after call (~3-5 minutes on a cold H200, GPU_CHECK_BUDGET_S default
#                 300; the full GPU suites can follow in a second gpu_check.sh run, reusing build-gpu):
#                 builds this tree's CLI and gpu_test and, at the same time, the baseline CLI from
#                 .carry/baseline (scripts/prepare_carry.sh --baseline REV); the spill check of this
#                 build; the proxy auto rows (1/16/64/256/2048 tokens, 2/4/8 virtual ranks) of both
#                 trees; `bench --verify-pass --model kimi-k2` at 4 and 8 virtual ranks of both; this
#                 tree's auto rows with the row push off (knob nopush, 1/16/64 tokens); the measured
#                 floor (arfuse_proxy_floor, floor_virtual.json); PERF33_PHASES="ALGO:TOKENS ..." adds
#                 the phase attribution of --phases for those rows (the phase-timing CLI builds beside
#                 the others); then scripts/perf_compare.py's before/after table with each row's floor,
#                 printed last (perf33_table.txt). PERF33_FAULT_KNOBS: the knobs (or `default`) whose
#                 tests add the fault matrix (default nopush)
#   --perf33-full with --perf33: also every forced peer path in the table, every knob of PERF33_KNOBS
#                 and gpu_test's quick filter under each (the phase-1 call; ~7-8 minutes, budget 470)
#   --floor       issue 33's floor call, then exit (~3-4 minutes, GPU_CHECK_BUDGET_S default 330): builds
#                 arfuse_cli and arfuse_proxy_floor, and beside them the phase-timing CLI; the measured
#                 floor of one synchronous call (bin/arfuse_proxy_floor: n PDL-chained graphs of an
#                 empty kernel and of a one-trip barrier, virtual ranks 1/2/4/8, and real ranks when
#                 there are >= 2 GPUs; floor_*.json), the auto rows at 1/16/64 tokens beside it, and
#                 the phase attribution of --phases (PROXY figures)
#   --peers       the single-GPU peers (bench/peers.py --single: torch.compile, FlashInfer, a copy;
#                 FlashInfer from .carry/peers, scripts/fetch_peer_wheels.sh), the rotated
#                 addrmsnorm bench and `bench --procs 2` on the one GPU (h200_*.json)
# With several GPUs the benchmarks run at TP = every GPU, and at TP2 too when there are more than 2.
#
# Needs: nvcc, cmake, ninja (or make), NCCL (system, CUDA toolkit, or the nvidia-nccl wheel that
# PyTorch ships), GoogleTest (system, or .carry/googletest), RE2 (system, or .carry/re2: headers and
# libre2.a from Debian's libre2-dev 20220601, which needs no Abseil). Never enables NVLink multicast.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
quick=0
bench_only=0
tests_only=0
proxy=0
large=0
smoke=0
experiments=0
peers=0
phases=0
calproxy=0
perf33=0
perf33_full=0
floor=0
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    --proxy) proxy=1 ;;
    --large) large=1 ;;
    --smoke) smoke=1 ;;
    --experiments) experiments=1 ;;
    --peers) peers=1 ;;
    --phases) phases=1 ;;
    --calibrated-proxy) calproxy=1 ;;
    --perf33) perf33=1 ;;
    --floor) floor=1 ;;
    --perf33-full) perf33=1; perf33_full=1 ;;
    --bench-only) bench_only=1 ;;
    --tests-only) tests_only=1 ;;
    *) echo "gpu_check.sh: unknown argument $a"; exit 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-gpu
summary=$OUT/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c GPU || true)
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
arch=${arch:-90}
note "gpu_check: $(date -u +%FT%TZ) $ngpu GPU(s), sm_$arch, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"

# NCCL: prefer a system install; else the Python wheel's library with a header carried along.
nccl_args=()
if ! [ -f /usr/include/nccl.h ] && ! [ -f /usr/local/cuda/include/nccl.h ]; then
  pydir=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
  inc=$pydir/include
  [ -f "$inc/nccl.h" ] || inc=$root/.carry/nccl/include
  lib=$(ls "$pydir"/lib/libnccl.so* 2>/dev/null | head -1)
  nccl_args=(-DNCCL_INCLUDE_DIR="$inc" -DNCCL_LIBRARY="$lib")
  export LD_LIBRARY_PATH="$pydir/lib:${LD_LIBRARY_PATH:-}"
  note "nccl: header $inc, library $lib"
fi

# Every step runs under the call's time budget (the device tool stops a command at 10 minutes):
# a step that would start with less than 20 s left is skipped and says so.
# (budget and start_s are set by the flow that runs the steps)
left() { echo $(( budget - ($(date +%s) - start_s) )); }
step() {  # step LABEL LIMIT_S OUTFILE cmd...   (OUTFILE gets stdout+stderr, appended)
  local label=$1 limit=$2 outf=$3; shift 3
  # GPU_CHECK_SKIP: an extended regex of step labels not to run (for a follow-up call that only
  # needs what an earlier call did not reach), e.g. '^ctest -L (gpu|multigpu)$|^bench fused \(TP'.
  if [ -n "${GPU_CHECK_SKIP:-}" ] && echo "$label" | grep -Eq -- "$GPU_CHECK_SKIP"; then
    note "$label: SKIPPED (GPU_CHECK_SKIP)"; return 99
  fi
  local l; l=$(left)
  if [ "$l" -lt 20 ]; then note "$label: SKIPPED (time budget: ${l}s left)"; return 99; fi
  [ "$l" -lt "$limit" ] && limit=$l
  local t1=$(date +%s)
  timeout "$limit" "$@" >> "$outf" 2>&1
  local rc=$?
  last_step_s=$(( $(date +%s) - t1 ))
  return $rc
}

gen=Ninja
command -v ninja >/dev/null || gen="Unix Makefiles"

# ---- phases: where a call's time goes, from stamps inside the kernels (attribution build) ---------
# phases_build: the phase-timing CLI (build-phases); phases_run: its rows beside the normal build's.
pbuild=$root/build-phases
phases_build() {
  cmake -S "$root" -B "$pbuild" -G "$gen" -DARFUSE_ARCH="$arch" -DCMAKE_BUILD_TYPE=Release -DARFUSE_BUILD_TESTS=OFF \
    -DARFUSE_PHASE_TIMING=ON "${nccl_args[@]}" && cmake --build "$pbuild" -j"$(nproc)" --target arfuse_cli
}
phases_run() {  # phases_run "ALGO:TOKENS ..."
  local n spec algo tok b bin
  for n in 2 4 8; do
    for spec in $1; do
      algo=${spec%%:*} tok=${spec#*:}
      for b in normal phases; do
        bin=$build/bin/arfuse; [ $b = phases ] && bin=$pbuild/bin/arfuse
        step "phases $b TP$n $algo" 40 "$OUT/phases_raw.txt" bash -c "'$bin' bench --op fused --ranks $n --algo $algo \
          --tokens $tok --hidden 7168 -n 30 -J '$OUT/phases_${b}_tp${n}_${algo}_${tok}.json' 2>&1 | tee '$OUT/phases_${b}_cur.txt'"
        [ $b = phases ] && python3 "$root/scripts/phase_report.py" --label "TP$n $algo $tok tok" \
          -J "$OUT/phases_tp${n}_${algo}_${tok}.json" < "$OUT/phases_${b}_cur.txt" | tee -a "$summary"
        grep -E "^ +$tok +[0-9]+ +$algo" "$OUT/phases_${b}_cur.txt" | sed "s/^/  $b: /" >> "$summary"
      done
    done
  done
}

# ---- perf33: issue 33's one measurement call (everything above the generic build, then exit) -------
# Knobs: NAME=VAR=VALUE[,VAR=VALUE]:ALGOS:TOKENS, one bench per rank count each (PROXY rows of this tree
# under that environment); PERF33_KNOBS replaces the list. The tests of a knob run gpu_test's quick
# filter under the same environment.
# nopush: the row push off (ARFUSE_ROW_PUSH=0), so that its share of the change is measured apart from
# the rest (that row runs the e7608fe machine code on every kernel the auto plan picks at these sizes).
# wide8: whole rows of 513-1024 vectors on the 8-vector kernels (ARFUSE_WIDE_TWO=0), which are dc08966's
# machine code: the wide 2-vector kernels' share of change 34, and a control for drift between the trees.
perf33_knobs_default="nopush=ARFUSE_ROW_PUSH=0:auto:1,16,64
wide8=ARFUSE_WIDE_TWO=0:auto:16,64,256,2048"
perf33_knobs_full="nopush=ARFUSE_ROW_PUSH=0:auto,lowlatency,oneshot,twoshot:1,4,16,64
split128=ARFUSE_EXP_SPLIT_VECS=128:auto,lowlatency,oneshot:1,4,16
shared=ARFUSE_EXP_SPLIT_SHARED=1:auto,oneshot,twoshot:64,256"
# gpu_test's quick filter (--perf33-full), plainly and under each of PERF33_TEST_KNOBS (names from the
# list above): batch invariance (the same bits across paths, geometries, row splits and token counts,
# against fp64 too), graph replays with new inputs, shape changes back to back and two streams at once.
perf33_filter='*BatchInvariance*:Worlds/Gpu_VirtualRanks.GraphReplayWithNewInputs/*:Worlds/Gpu_VirtualRanks.ChangingShapesBackToBack/*:*TwoStreamsAtOnce*'
perf33_test_knobs_full="nopush split128 shared"
# ...and the fault matrix (refused, divergent, skipped and late calls, two streams) where a knob touches
# the protocol: the row reduction of failed tiles (nopush: the barrier variant).
perf33_fault_knobs=" ${PERF33_FAULT_KNOBS:-nopush} "
perf33_run() {
  local knobs0=$perf33_knobs_default algos0=auto test_knobs0="" budget0=300
  [ $perf33_full = 1 ] && knobs0=$perf33_knobs_full algos0=auto,lowlatency,oneshot,twoshot test_knobs0="default $perf33_test_knobs_full" budget0=470
  budget=${GPU_CHECK_BUDGET_S:-$budget0}
  start_s=$(date +%s)
  local base=$root/build-baseline bpid="" t1 n b bin tree spec name envs algos toks rc
  local knobs=${PERF33_KNOBS:-$knobs0}
  local T=${PERF33_TOKENS:-1,16,64,256,2048}
  local A=${PERF33_ALGOS:-$algos0}  # hoststaged: add it here (minutes at 2048 tokens)
  # The baseline CLI builds beside this tree (the two builds' longest files overlap; 16 cores).
  if [ "${PERF33_BASELINE:-1}" = 0 ]; then
    note "perf33: PERF33_BASELINE=0: no baseline build, no before figures"
  elif [ -d "$root/.carry/baseline/src" ]; then
    (cd "$root/.carry/baseline" && rm -rf .carry && ln -s "$root/.carry" .carry &&
      cmake -S . -B "$base" -G "$gen" -DARFUSE_ARCH="$arch" -DCMAKE_BUILD_TYPE=Release -DARFUSE_BUILD_TESTS=OFF \
        "${nccl_args[@]}" && cmake --build "$base" -j"$(nproc)" --target arfuse_cli) > "$OUT/build_baseline.log" 2>&1 &
    bpid=$!
  else
    note "perf33: no .carry/baseline/src: no before figures (git archive e7608fe | tar -x -C .carry/baseline)"
  fi
  # PERF33_PHASES="ALGO:TOKENS ...": the phase-timing CLI builds beside them too, and its rows
  # (phases_run) follow the knob rows.
  local ppid=""
  if [ -n "${PERF33_PHASES:-}" ]; then
    phases_build > "$OUT/build_phases.log" 2>&1 &
    ppid=$!
  fi
  t1=$(date +%s)
  if ! { cmake -S "$root" -B "$build" -G "$gen" -DARFUSE_ARCH="$arch" -DCMAKE_BUILD_TYPE=Release "${nccl_args[@]}" &&
         cmake --build "$build" -j"$(nproc)" --target arfuse_cli gpu_test arfuse_proxy_floor; } > "$OUT/build.log" 2>&1; then
    note "BUILD FAILED (see build.log)"; tail -40 "$OUT/build.log"
    [ -n "$bpid" ] && kill "$bpid" 2>/dev/null
    [ -n "$ppid" ] && kill "$ppid" 2>/dev/null
    return 1
  fi
  note "build (arfuse_cli, gpu_test, arfuse_proxy_floor): ok in $(( $(date +%s) - t1 )) s"
  # The measured floor of this call's machine, which perf_compare.py sets beside the rows below 256 tokens.
  step "perf33 floor" 60 "$OUT/floor.txt" "$build/bin/arfuse_proxy_floor" -J "$OUT/floor_virtual.json"
  note "perf33 floor: rc=$? in ${last_step_s:-0} s"
  python3 "$root/tests/cpu/check_spills.py" "$build/src/CMakeFiles/arfuse.dir" 1 "$arch" > "$OUT/spills.txt" 2>&1
  note "spill check (ptxas reports of this build): rc=$? $(head -1 "$OUT/spills.txt")"
  local have_base=0
  if [ -n "$bpid" ]; then
    if wait "$bpid"; then
      have_base=1; note "baseline build: ok, $(( $(date +%s) - t1 )) s after this tree's build started"
    else
      note "baseline build FAILED (build_baseline.log)"; tail -5 "$OUT/build_baseline.log" >> "$summary"
    fi
  fi
  # 1. the proxy table, this tree and the baseline side by side per rank count
  for n in 2 4 8; do
    for tree in new baseline; do
      bin=$build/bin/arfuse; [ $tree = baseline ] && bin=$base/bin/arfuse
      [ $tree = baseline ] && [ $have_base = 0 ] && continue
      step "perf33 $tree TP$n" 90 "$OUT/bench.txt" "$bin" bench --op fused --virtual --ranks $n \
        --algo "$A" --tokens "$T" --hidden 7168 -n 20 -J "$OUT/${tree}_tp${n}.json"
      note "perf33 $tree TP$n: rc=$? in ${last_step_s:-0} s"
    done
  done
  # 2. the verify pass of the motivating workload, 4 and 8 virtual ranks
  for n in 4 8; do
    for tree in new baseline; do
      bin=$build/bin/arfuse; [ $tree = baseline ] && bin=$base/bin/arfuse
      [ $tree = baseline ] && [ $have_base = 0 ] && continue
      step "perf33 verify $tree TP$n" 60 "$OUT/bench.txt" "$bin" bench --verify-pass --virtual --model kimi-k2 --algo auto \
        --ranks $n --tokens 1,16,64,256 -n 10 -J "$OUT/verify_${tree}_tp${n}.json"
      note "perf33 verify-pass $tree TP$n: rc=$? in ${last_step_s:-0} s"
    done
  done
  # 2b. the verify pass under knobs (PERF33_VERIFY_KNOBS: names from the knob list; `default` is this
  # tree as is), alternated PERF33_VERIFY_REPS times so that drift between runs shows as drift, not as
  # a knob's effect (verify_knob_NAME_tpN_rK.json; scripts/perf_compare.py prints their medians)
  local vk rep
  for rep in $(seq 1 "${PERF33_VERIFY_REPS:-1}"); do
    for vk in ${PERF33_VERIFY_KNOBS:-}; do
      envs=ARFUSE_LOG_LEVEL=WARN
      [ "$vk" != default ] && envs=$(echo "$knobs" | grep -m1 "^$vk=" | cut -d: -f1 | cut -d= -f2-)
      [ -z "$envs" ] && { note "perf33 verify knob $vk: not a knob of the list"; continue; }
      for n in 4 8; do
        # shellcheck disable=SC2086
        step "perf33 verify knob $vk TP$n" 60 "$OUT/bench.txt" env ${envs//,/ } "$build/bin/arfuse" bench --verify-pass \
          --virtual --model kimi-k2 --algo auto --ranks $n --tokens "${PERF33_VERIFY_TOKENS:-1,16,64}" -n 10 \
          -J "$OUT/verify_knob_${vk}_tp${n}_r${rep}.json" < /dev/null
        note "perf33 verify knob $vk ($envs) TP$n rep $rep: rc=$? in ${last_step_s:-0} s"
      done
    done
  done
  # 3. each experimental knob's rows (this tree)
  while IFS= read -r spec; do
    [ -z "$spec" ] && continue
    name=${spec%%=*}; spec=${spec#*=}
    envs=${spec%%:*}; spec=${spec#*:}; algos=${spec%%:*}; toks=${spec#*:}
    for n in 2 4 8; do
      # shellcheck disable=SC2086  # envs: VAR=VALUE words for env
      step "perf33 knob $name TP$n" 60 "$OUT/bench.txt" env ${envs//,/ } "$build/bin/arfuse" bench --op fused --virtual \
        --ranks $n --algo "$algos" --tokens "$toks" --hidden 7168 -n 20 -J "$OUT/knob_${name}_tp${n}.json" < /dev/null
      note "perf33 knob $name ($envs) TP$n: rc=$? in ${last_step_s:-0} s"
    done
  done <<< "$knobs"
  # 3b. the phase attribution (PERF33_PHASES), of this tree
  if [ -n "$ppid" ]; then
    if wait "$ppid"; then
      note "phase-timing build: ok, $(( $(date +%s) - t1 )) s after this tree's build started"
      phases_run "$PERF33_PHASES"
    else
      note "phase-timing build FAILED (build_phases.log)"; tail -5 "$OUT/build_phases.log" >> "$summary"
    fi
  fi
  # 4. the GPU suites' quick filter, plainly and under each knob (--perf33-full or PERF33_TEST_KNOBS)
  local tk
  for tk in ${PERF33_TEST_KNOBS:-$test_knobs0}; do
    spec=$(echo "$knobs" | grep -m1 "^$tk=" | cut -d: -f1)
    [ "$tk" = default ] && spec="default=ARFUSE_LOG_LEVEL=WARN"
    [ -z "$spec" ] && { note "perf33 tests $tk: not a knob of the list"; continue; }
    name=${spec%%=*}; envs=${spec#*=}
    local filter=$perf33_filter
    case "$perf33_fault_knobs" in *" $name "*) filter="$filter:*FaultMatrix*" ;; esac
    # shellcheck disable=SC2086
    step "perf33 tests $name" 120 "$OUT/tests_$name.log" env ${envs//,/ } "$build/tests/gpu/gpu_test" \
      --gtest_filter="$filter"
    rc=$?
    note "perf33 tests $name ($envs): rc=$rc in ${last_step_s:-0} s $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/tests_$name.log" 2>/dev/null | tail -2 | tr '\n' ' ')"
    [ $rc != 0 ] && [ $rc != 99 ] && grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/tests_$name.log" | sort -u | head -10 | sed 's/^/  /' >> "$summary"
  done
  # 4b. what the captured-NCCL graph watch costs per call (PERF33_GRAPH_WATCH=1; docs/multihost.md)
  if [ "${PERF33_GRAPH_WATCH:-0}" = 1 ]; then
    step "perf33 graph watch cost" 120 "$OUT/graph_watch.txt" bash "$root/scripts/graph_watch_cost.sh" "$build" "$OUT"
    note "perf33 graph watch cost: rc=$? in ${last_step_s:-0} s"
    grep -E "added" "$OUT/graph_watch.txt" | sed 's/^/  /' >> "$summary"
  fi
  # 5. the table, printed last
  python3 "$root/scripts/perf_compare.py" "$OUT" --json "$OUT/perf33_table.json" > "$OUT/perf33_table.txt" 2>&1
  note "perf_compare: rc=$?"
  local tgz; tgz=$(mktemp /tmp/gpu_check_logs.XXXXXX)
  ( cd "$OUT" && tar czf "$tgz" --exclude=summary.txt --exclude=perf33_table.txt . ) || note "tar: failed"
  find "$OUT" -mindepth 1 -maxdepth 1 ! -name summary.txt ! -name perf33_table.txt -exec rm -rf {} +
  mv "$tgz" "$OUT/logs.tgz"
  echo; grep -v '^ ' "$summary" | tail -45; echo; cat "$OUT/perf33_table.txt"
}
# ---- floor: the measured floor of one synchronous call, beside the call itself (issue 33) ----------
floor_run() {
  budget=${GPU_CHECK_BUDGET_S:-330}
  start_s=$(date +%s)
  local t1 ppid="" n
  t1=$(date +%s)
  phases_build > "$OUT/build_phases.log" 2>&1 &
  ppid=$!
  if ! { cmake -S "$root" -B "$build" -G "$gen" -DARFUSE_ARCH="$arch" -DCMAKE_BUILD_TYPE=Release "${nccl_args[@]}" &&
         cmake --build "$build" -j"$(nproc)" --target arfuse_cli arfuse_proxy_floor; } > "$OUT/build.log" 2>&1; then
    note "BUILD FAILED (see build.log)"; tail -40 "$OUT/build.log"; kill "$ppid" 2>/dev/null
    return 1
  fi
  note "build (arfuse_cli, arfuse_proxy_floor): ok in $(( $(date +%s) - t1 )) s"
  # 1. the floor: virtual ranks on GPU 0; real ranks too when there are several GPUs
  step "floor virtual" 120 "$OUT/floor.txt" "$build/bin/arfuse_proxy_floor" --ranks "${FLOOR_RANKS:-1,2,4,8}" \
    --ctas "${FLOOR_CTAS:-1,4,16,32,64,128}" -J "$OUT/floor_virtual.json"
  note "floor virtual: rc=$? in ${last_step_s:-0} s"
  if [ "$ngpu" -ge 2 ]; then
    local rk=2; [ "$ngpu" -ge 4 ] && rk=2,4; [ "$ngpu" -ge 8 ] && rk=2,4,8
    step "floor gpus" 90 "$OUT/floor.txt" "$build/bin/arfuse_proxy_floor" --gpus --ranks "$rk" \
      --ctas "${FLOOR_CTAS:-1,4,16,32,64,128}" -J "$OUT/floor_gpus.json"
    note "floor gpus ($rk): rc=$? in ${last_step_s:-0} s"
  fi
  # 2. the call itself in the same call: auto and the forced paths at the verify-pass sizes
  for n in 2 4 8; do
    step "floor bench TP$n" 90 "$OUT/bench.txt" "$build/bin/arfuse" bench --op fused --virtual --ranks $n \
      --algo auto,lowlatency,oneshot,twoshot --tokens 1,16,64 --hidden 7168 -n 20 -J "$OUT/floor_bench_tp${n}.json"
    note "floor bench TP$n: rc=$? in ${last_step_s:-0} s"
  done
  # 3. the phase attribution of the same paths
  if wait "$ppid"; then
    note "phase-timing build: ok, $(( $(date +%s) - t1 )) s after the build started"
    phases_run "${FLOOR_PHASES:-lowlatency:1 oneshot:16 oneshot:64}"
  else
    note "phase-timing build FAILED (build_phases.log)"; tail -5 "$OUT/build_phases.log" >> "$summary"
  fi
  cat "$OUT/floor.txt" >> "$summary"
  local tgz; tgz=$(mktemp /tmp/gpu_check_logs.XXXXXX)
  ( cd "$OUT" && tar czf "$tgz" --exclude=summary.txt . ) || note "tar: failed"
  # The device tool brings back few files: the summary, the floor's JSON and the archive of the rest.
  find "$OUT" -mindepth 1 -maxdepth 1 ! -name summary.txt ! -name 'floor_virtual.json' ! -name 'floor_gpus.json' \
    -exec rm -rf {} +
  mv "$tgz" "$OUT/logs.tgz"
  echo; cat "$summary"
}
t0=$(date +%s)
# A kept build directory trusts modification times, but a copied working tree can carry a source
# file whose time is older than the object built from its previous content (a header changed that
# way once left doctor.cc and gpu_test.cc compiled against an old class layout). Keep a content
# hash per source file and touch every file whose content changed since the last build.
hashes=$build/.gpu_check_source_hashes
mkdir -p "$build"
( cd "$root" && git ls-files -co --exclude-standard -- src include tools tests python cmake CMakeLists.txt 2>/dev/null |
  while read -r f; do [ -f "$f" ] && sha1sum "$f"; done ) > "$hashes.new"
if [ -f "$hashes" ]; then
  changed=$(sort "$hashes" "$hashes" "$hashes.new" | uniq -u | awk '{print $2}' | sort -u)
  for f in $changed; do [ -f "$root/$f" ] && touch "$root/$f"; done
  note "source files changed since the kept build: $(echo "$changed" | grep -c .)"
fi
if [ $floor = 1 ]; then  # its own builds and steps, like perf33's
  floor_run || exit 1
  mv "$hashes.new" "$hashes"
  exit 0
fi
if [ $perf33 = 1 ]; then  # its own builds, steps and table; the kept build's hashes as below
  perf33_run || exit 1
  mv "$hashes.new" "$hashes"
  exit 0
fi
# GPU_CHECK_NO_TESTS=1: build the library and the CLI only (a benchmark-only call on a cold machine).
tests_opt=(); [ "${GPU_CHECK_NO_TESTS:-0}" = 1 ] && tests_opt=(-DARFUSE_BUILD_TESTS=OFF)
if ! { cmake -S "$root" -B "$build" -G "$gen" -DARFUSE_ARCH="$arch" -DCMAKE_BUILD_TYPE=Release "${tests_opt[@]}" "${nccl_args[@]}" &&
       cmake --build "$build" -j"$(nproc)"; } > "$OUT/build.log" 2>&1; then
  note "BUILD FAILED (see build.log)"; tail -40 "$OUT/build.log"; exit 1
fi
mv "$hashes.new" "$hashes"
note "build: ok in $(( $(date +%s) - t0 )) s"

{
  echo "== fatbin"; "$root/scripts/check_fatbin.sh" "$build/src/libarfuse.so" "$arch"
} > "$OUT/tests.log" 2>&1
fatbin_rc=$?
# rc and every FAIL line: the last line alone hid a failing check (it prints its count line last on failure)
note "fatbin: rc=$fatbin_rc $(grep -E '^sm_[0-9]+[a-z]*: [0-9]+ kernels' "$OUT/tests.log" | tr '\n' ' ')"
grep -E '^FAIL' "$OUT/tests.log" | head -20 | sed 's/^/  /' >> "$summary"

budget=${GPU_CHECK_BUDGET_S:-570}
start_s=$t0

run_ctest() {  # label, timeout, [-R regex], [-E regex]
  step "ctest -L $1${3:+ -R $3}" "$2" "$OUT/tests.log" ctest --test-dir "$build" -L "^$1\$" ${3:+-R "$3"} ${4:+-E "$4"} --timeout 300 --output-on-failure -V
  local rc=$?
  [ $rc = 99 ] && return
  local line
  line=$(grep -E "tests passed|tests failed" "$OUT/tests.log" | tail -1)
  note "ctest -L $1 ${3:+-R $3} ${4:+-E $4}: rc=$rc in ${last_step_s} s: $line"
  # Name every failed test (CTest's own list of this run's failures) and every failed gtest case.
  if [ $rc != 0 ]; then
    sed 's/^/  failed: /' "$build/Testing/Temporary/LastTestsFailed.log" >> "$summary" 2>/dev/null
    grep -E '^\[  FAILED  \] [A-Za-z0-9_/.]+' "$OUT/tests.log" | sort -u | head -40 | sed 's/^/  /' >> "$summary"
  fi
}
# ---- smoke: the rebuilt protocol first (one command each; failures listed) ------------------------
if [ $smoke = 1 ]; then
  step "smoke selftest" 120 "$OUT/smoke.log" "$build/bin/arfuse" selftest --quick
  note "smoke selftest --quick: rc=$? $(tail -1 "$OUT/smoke.log")"
  step "smoke matrix" 200 "$OUT/smoke.log" "$build/tests/gpu/gpu_test" \
    --gtest_filter='*FaultMatrix*:*BatchInvariance*:Gpu_Fault*:Gpu_Streams*'
  note "smoke fault matrix + invariance: rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/smoke.log" | tail -2 | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/smoke.log" | sort -u | head -30 | sed 's/^/  /' >> "$summary"
  grep -E -A4 "^[^ ]*:[0-9]+: Failure$" "$OUT/smoke.log" | head -60 >> "$summary"
fi
# ---- proxy: virtual-rank timing of every forced path, before (baseline tree) and after -----------
proxy_bench() {  # binary, prefix
  for n in 2 4 8; do
    step "proxy $2 TP$n" 90 "$OUT/proxy.txt" "$1" bench --op fused --ranks $n --algo all --tokens 1,4,16,64 \
      --hidden 7168 -n 30 -J "$OUT/${2}_tp${n}.json"
    note "proxy $2 TP$n: rc=$?"
  done
  if [ $large = 1 ]; then  # the large-message paths: two-shot against one-shot and auto
    for n in 2 4 8; do
      step "proxy large $2 TP$n" 90 "$OUT/proxy.txt" "$1" bench --op fused --ranks $n --algo auto,oneshot,twoshot \
        --tokens 64,256,1024,2048 --hidden 7168 -n 20 -J "$OUT/${2}_large_tp${n}.json"
      note "proxy large $2 TP$n: rc=$?"
    done
    # rows narrower than two-shot's pushed slots (device/args.h twoShotTileVecs), each point checked
    # against fp64 by the bench (#wrong), peer and host-staged (its two-shot variant from 1024 tokens)
    step "proxy narrow $2 TP8" 60 "$OUT/proxy.txt" "$1" bench --op fused --ranks 8 --algo twoshot,hoststaged \
      --tokens 1,17,300,1024 --hidden 72 -n 3 -J "$OUT/${2}_narrow_tp8.json"
    note "proxy narrow $2 TP8: rc=$? $(grep -c '"wrong": 0' "$OUT/${2}_narrow_tp8.json" 2>/dev/null) rows with 0 wrong"
  fi
}
if [ $proxy = 1 ]; then
  proxy_bench "$build/bin/arfuse" proxy
  # the low-latency two-phase variant forced (ARFUSE_LL_TWO_PHASE=1), to set its auto-plan window
  for n in 2 4 8; do
    step "proxy ll2 TP$n" 60 "$OUT/proxy.txt" env ARFUSE_LL_TWO_PHASE=1 "$build/bin/arfuse" bench --op fused \
      --ranks $n --algo lowlatency,oneshot --tokens 1,4,16,32 --hidden 7168 -n 30 -J "$OUT/proxy_ll2_tp${n}.json"
    note "proxy ll2 TP$n: rc=$?"
  done
  if [ -d "$root/.carry/baseline/src" ]; then
    base=$root/build-baseline
    t1=$(date +%s)
    if (cd "$root/.carry/baseline" && rm -rf .carry && ln -s "$root/.carry" .carry && \
        cmake -S . -B "$base" -G "$gen" -DARFUSE_ARCH="$arch" -DCMAKE_BUILD_TYPE=Release -DARFUSE_BUILD_TESTS=OFF "${nccl_args[@]}" && \
        cmake --build "$base" -j"$(nproc)" --target arfuse_cli) > "$OUT/build_baseline.log" 2>&1; then
      note "baseline build: ok in $(( $(date +%s) - t1 )) s"
      proxy_bench "$base/bin/arfuse" baseline
    else
      note "baseline build FAILED (build_baseline.log)"; tail -5 "$OUT/build_baseline.log" >> "$summary"
    fi
  fi
  if [ $experiments = 1 ]; then
    # what the safety features and the batch-invariant mode cost (issue 17 items 4 and 8): the
    # flight recorder off, and ARFUSE_DETERMINISTIC=1, same rows, same build
    for v in "ARFUSE_PDL=0:nopdl" "ARFUSE_MAX_CHUNKS=1:nosplit" "ARFUSE_POLL_SLEEP_NS=100:sleep100" \
             "ARFUSE_FLIGHT_RECORDER=0:noflight" "ARFUSE_DETERMINISTIC=1:determ"; do
      # GPU_CHECK_EXPERIMENTS: the names to run (default all), e.g. "noflight determ"
      case " ${GPU_CHECK_EXPERIMENTS:-${v#*:}} " in *" ${v#*:} "*) ;; *) continue ;; esac
      for n in 2 4 8; do
        step "exp ${v#*:} TP$n" 40 "$OUT/proxy.txt" env "${v%%:*}" "$build/bin/arfuse" bench --op fused --ranks $n \
          --algo lowlatency,oneshot --tokens 1,16 --hidden 7168 -n 30 -J "$OUT/exp_${v#*:}_tp${n}.json"
        note "exp ${v#*:} TP$n: rc=$?"
      done
    done
  fi
fi
# ---- phases: where a call's time goes, from stamps inside the kernels (attribution build) ---------
if [ $phases = 1 ]; then
  t1=$(date +%s)
  if phases_build > "$OUT/build_phases.log" 2>&1; then
    note "phase-timing build: ok in $(( $(date +%s) - t1 )) s"
    phases_run "lowlatency:1 oneshot:16 twoshot:64"
  else
    note "phase-timing build FAILED (build_phases.log)"; tail -5 "$OUT/build_phases.log" >> "$summary"
  fi
fi
# ---- calibrated proxy: the plan's crossovers from this GPU's own measurements (virtual ranks) ------
if [ $calproxy = 1 ]; then
  step "calibrate proxy" 200 "$OUT/calibrate_proxy.txt" "$build/bin/arfuse" doctor --calibrate --ranks 2,4,8 \
    --tokens 1,4,16,64,256,1024,2048 -n 10 --out "$OUT/calibration_proxy.json"
  note "doctor --calibrate --ranks 2,4,8 (virtual): rc=$? in ${last_step_s:-0} s"
  grep -iE "fastest up to|applies|limit" "$OUT/calibrate_proxy.txt" | head -12 | sed 's/^/  /' >> "$summary"
  if [ -s "$OUT/calibration_proxy.json" ]; then
    for n in 2 4 8; do
      step "proxy calibrated TP$n" 60 "$OUT/proxy.txt" env ARFUSE_CALIBRATION_FILE="$OUT/calibration_proxy.json" \
        "$build/bin/arfuse" bench --op fused --ranks $n --algo auto,lowlatency,oneshot,twoshot \
        --tokens 1,4,16,64,256,1024,2048 --hidden 7168 -n 20 -J "$OUT/proxy_calibrated_tp${n}.json"
      note "proxy calibrated TP$n: rc=$?"
    done
  fi
fi
# GPU_CHECK_FIRST: a command (run from the build directory) before everything else, e.g. a gtest
# filter over the cases an earlier call did not reach.
if [ -n "${GPU_CHECK_FIRST:-}" ]; then
  step "GPU_CHECK_FIRST" 150 "$OUT/tests.log" bash -c "cd '$build' && $GPU_CHECK_FIRST"
  note "GPU_CHECK_FIRST ($GPU_CHECK_FIRST): rc=$? in ${last_step_s:-0} s"
  grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests.log" | tail -5 | sed 's/^/  /' >> "$summary"
fi
if [ $bench_only = 0 ]; then
  echo "== gpu" >> "$OUT/tests.log"; run_ctest gpu 300 "" "python_gpu|gpu_multihost"
  # Groups over simulated hosts (issue 23): several processes time-slice GPU 0, so a step of their own.
  echo "== gpu_multihost" >> "$OUT/tests.log"; run_ctest gpu 300 gpu_multihost
  # GPU_CHECK_REPEAT_KILLED=N: the killed-rank scenarios across hosts N times more (a race between
  # the intra-host and the NCCL watch's bounds made one of them fail once in a run: docs/multihost.md)
  if [ "${GPU_CHECK_REPEAT_KILLED:-0}" -gt 0 ]; then
    echo "== gpu_multihost killed x$GPU_CHECK_REPEAT_KILLED" >> "$OUT/tests.log"
    step "ctest killed repeat" 300 "$OUT/tests.log" ctest --test-dir "$build" -R 'gpu_multihost_.*killed' \
      --repeat until-fail:"$GPU_CHECK_REPEAT_KILLED" --timeout 300 --output-on-failure
    note "ctest gpu_multihost_*killed x$GPU_CHECK_REPEAT_KILLED (until fail): rc=$? in ${last_step_s:-0} s: $(grep -E 'tests passed|tests failed' "$OUT/tests.log" | tail -1)"
  fi
  # The hierarchical path against nccl across 2 simulated hosts (4 processes time-slice GPU 0 when
  # there are fewer GPUs: a check that the bench runs and its figures are labelled, not a figure).
  mh_procs=4; [ "$ngpu" -ge 4 ] && mh_procs=$ngpu
  step "bench --hosts" 120 "$OUT/bench_hosts.txt" "$build/bin/arfuse" bench --procs $mh_procs --hosts 2 \
    --algo hierarchical,nccl --tokens 1,64,256 -n 5 -w 1 --calls 4 --procs-timeout 110 \
    -J "$OUT/bench_procs${mh_procs}_hosts2.json"
  note "bench --procs $mh_procs --hosts 2: rc=$? $(grep -cE 'hierarchical|nccl' "$OUT/bench_hosts.txt") lines"
  grep -E '^ *[0-9]+ .*(hierarchical|nccl)|no figure|cannot' "$OUT/bench_hosts.txt" | head -12 | sed 's/^/  /' >> "$summary"
  echo "== multigpu" >> "$OUT/tests.log"; run_ctest multigpu 300
  grep -E '^\[ info \]' "$OUT/tests.log" | sort -u | head -30 >> "$summary"
  grep -E -A6 "^[^ ]*:[0-9]+: Failure$" "$OUT/tests.log" | head -60 >> "$summary"

  step selftest 150 "$OUT/selftest.txt" "$build/bin/arfuse" selftest --quick
  note "selftest --quick: rc=$? $(tail -1 "$OUT/selftest.txt")"
  if [ "$ngpu" -ge 2 ]; then  # one process per GPU, every GPU
    step "selftest --procs" 120 "$OUT/selftest.txt" "$build/bin/arfuse" selftest --procs "$ngpu"
    note "selftest --procs $ngpu: rc=$? $(tail -1 "$OUT/selftest.txt")"
  fi
  echo "== python_gpu" >> "$OUT/tests.log"; run_ctest gpu 300 python_gpu
  grep -E "^=+ .* in [0-9.]+s" "$OUT/tests.log" | tail -1 >> "$summary"
  grep -E "^(FAILED|ERROR) tests/python" "$OUT/tests.log" | sort -u | head -20 >> "$summary"
  if [ "$ngpu" -ge 2 ] && python3 -c 'import torch' 2>/dev/null; then  # the adoption example, one process per GPU
    step "tp_decoder" 150 "$OUT/tp_decoder.txt" env PYTHONPATH="$root/python" ARFUSE_LIBRARY_PATH="$build/src/libarfuse.so" \
      python3 "$root/examples/tp_decoder.py" --nprocs "$ngpu" --require-arfuse --graph
    note "tp_decoder --nprocs $ngpu --require-arfuse --graph: rc=$? $(tail -2 "$OUT/tp_decoder.txt" | tr '\n' ' ')"
  fi
else
  note "tests: skipped (--bench-only)"
fi

# The single-GPU peers after the test suites (they need the tests' verdict less than the tests need time).
if [ $peers = 1 ]; then
  pyenv=(env PYTHONPATH="$root/python" ARFUSE_LIBRARY_PATH="$build/src/libarfuse.so" PYTHONUNBUFFERED=1)
  step "peers unpack" 60 "$OUT/peers.log" bash "$root/scripts/fetch_peer_wheels.sh" --unpack
  note "peers unpack: rc=$?"
  T=${PEERS_TOKENS:-1,16,256,1024,4096}
  step "bench addrmsnorm rotated" 90 "$OUT/peers.log" "$build/bin/arfuse" bench --op addrmsnorm --tokens $T -n 30 \
    --machine h200 -J "$OUT/h200_addrmsnorm_rotated.json"
  note "bench addrmsnorm rotated: rc=$?"
  step "peers single" 150 "$OUT/peers.log" "${pyenv[@]}" python3 "$root/bench/peers.py" --single --tokens $T -n 30 \
    --machine h200 -J "$OUT/h200_peers_single.json"
  note "peers --single: rc=$?"
  step "bench procs 2" 150 "$OUT/peers.log" "$build/bin/arfuse" bench --procs 2 --algo auto,oneshot,nccl,nccl-symm \
    --tokens 1,16 -n 5 -w 1 --calls 4 --procs-timeout 140 --machine h200 -J "$OUT/h200_procs2_shared.json"
  note "bench --procs 2: rc=$?"
  grep -E "arfuse|torch|flashinfer|copy|cannot run" "$OUT/peers.log" | grep -vE "^arfuse (INFO|WARN)" | head -40 >> "$summary"
fi

if [ $tests_only = 0 ]; then

# ---- benchmarks, doctor, calibration -------------------------------------------------------------
# The floor of one synchronous call (docs/perf.md change 32), virtual ranks; real ranks too with >= 2 GPUs.
step "bench floor" 60 "$OUT/bench.txt" "$build/bin/arfuse_proxy_floor" -J "$OUT/bench_floor_virtual.json"
note "bench floor: rc=$?"
if [ "$ngpu" -ge 2 ]; then
  step "bench floor gpus" 60 "$OUT/bench.txt" "$build/bin/arfuse_proxy_floor" --gpus --ranks "$(seq -s, 2 "$(( ngpu < 8 ? ngpu : 8 ))")" \
    -J "$OUT/bench_floor_gpus.json"
  note "bench floor gpus: rc=$?"
fi
has_epilogue=0
"$build/bin/arfuse" bench --help 2>&1 | grep -q -- '--epilogue' && has_epilogue=1
step "bench addrmsnorm" 90 "$OUT/bench.txt" "$build/bin/arfuse" bench --op addrmsnorm --tokens 1,4,16,64,256,1024,2048,4096,8192 \
  --hidden 7168 -n 30 -J "$OUT/bench_addrmsnorm.json"
note "bench addrmsnorm: rc=$?"
if [ $has_epilogue = 1 ]; then  # single GPU add + RMSNorm + quantisation against the copy floor
  step "bench addrmsnorm epilogues" 120 "$OUT/bench.txt" "$build/bin/arfuse" bench --op addrmsnorm \
    --epilogue none,fp8,fp8-token,nvfp4,nvfp4-swizzled --tokens 1,16,256,1024,2048,8192 --hidden 7168 -n 30 \
    -J "$OUT/bench_addrmsnorm_epilogue.json"
  note "bench addrmsnorm epilogues: rc=$?"
fi
# Fused, side by side with NCCL + separate add+RMSNorm: TP = every GPU (2 virtual ranks on one GPU),
# hidden 7168 and 8192; TP2 as well when there are more than 2 GPUs.
ranks=2; [ "$ngpu" -ge 2 ] && ranks=$ngpu
tps="$ranks"; [ "$ngpu" -gt 2 ] && tps="$ranks 2"
for tp in $tps; do
  for h in 7168 8192; do
    algo=all; [ "$h" = 8192 ] && algo=auto
    step "bench fused" 120 "$OUT/bench.txt" "$build/bin/arfuse" bench --op fused --ranks $tp --algo $algo \
      --tokens 1,2,4,8,16,32,64,128,256,512,1024,2048 --hidden $h -n 30 -J "$OUT/bench_fused_tp${tp}_h${h}.json"
    note "bench fused (TP$tp, hidden $h, --algo $algo): rc=$?"
  done
done
if [ $has_epilogue = 1 ]; then
  step "bench fused epilogues" 120 "$OUT/bench.txt" "$build/bin/arfuse" bench --op fused --ranks $ranks --algo auto \
    --epilogue none,fp8,fp8-token,nvfp4 --tokens 1,16,256,2048 --hidden 7168 -n 30 -J "$OUT/bench_fused_epilogue.json"
  note "bench fused epilogues (TP$ranks): rc=$?"
fi
if [ "$ngpu" -ge 2 ]; then
  step "verify-pass" 120 "$OUT/bench.txt" "$build/bin/arfuse" bench --verify-pass --model kimi-k2 --algo auto \
    --ranks $ngpu --tokens 1,4,16,64 -n 10 -J "$OUT/verify_pass_tp${ngpu}.json"
  note "verify-pass kimi-k2 (TP$ngpu, auto vs NCCL): rc=$?"
  step "verify-pass hoststaged real" 90 "$OUT/bench.txt" "$build/bin/arfuse" bench --verify-pass --model kimi-k2 \
    --algo hoststaged --ranks $ngpu --tokens 1,4,16,64 -n 10 -J "$OUT/verify_pass_hoststaged_tp${ngpu}.json"
  note "verify-pass hoststaged ($ngpu GPUs): rc=$?"
  step "bench hoststaged real" 90 "$OUT/bench.txt" "$build/bin/arfuse" bench --op fused --algo hoststaged --ranks $ngpu \
    --tokens 1,2,4,8,16,32,64,128,256 --hidden 7168 -n 30 -J "$OUT/bench_hoststaged_tp${ngpu}.json"
  note "bench hoststaged ($ngpu GPUs): rc=$?"
fi
step doctor 90 "$OUT/doctor.txt" "$build/bin/arfuse" doctor --save-topology "$OUT/topology.json"
note "doctor: rc=$? $(grep '^Summary' "$OUT/doctor.txt")"
step "doctor --json" 60 "$OUT/doctor.json" "$build/bin/arfuse" doctor --no-measure --json
cal_ranks=2; [ "$ngpu" -ge 2 ] && cal_ranks=$ngpu
step "doctor --calibrate" 150 "$OUT/calibrate.txt" "$build/bin/arfuse" doctor --calibrate --ranks $cal_ranks --quick \
  --out "$OUT/calibration.json"
note "doctor --calibrate --ranks $cal_ranks: rc=$? $(grep -m1 'applies (\|does not apply' "$OUT/calibrate.txt")"
grep -i "fastest up to" "$OUT/calibrate.txt" | head -3 >> "$summary"
step "doctor with calibration" 60 "$OUT/doctor_calibrated.json" env ARFUSE_CALIBRATION_FILE="$OUT/calibration.json" \
  "$build/bin/arfuse" doctor --no-measure --json
note "doctor with calibration: rc=$?"
if [ -s "$OUT/calibration.json" ] && [ "$ngpu" -ge 2 ]; then  # the plan with the machine's own crossovers
  step "bench fused calibrated" 120 "$OUT/bench.txt" env ARFUSE_CALIBRATION_FILE="$OUT/calibration.json" \
    "$build/bin/arfuse" bench --op fused --ranks $ngpu --algo auto --tokens 1,4,16,64,256,1024,2048 --hidden 7168 -n 30 \
    -J "$OUT/bench_fused_tp${ngpu}_calibrated.json"
  note "bench fused calibrated (TP$ngpu): rc=$?"
fi
if [ "$ngpu" -ge 2 ]; then  # what NCCL tuning alone buys (one child process per NCCL setting)
  step "bench nccl-sweep" 200 "$OUT/bench_nccl_sweep.txt" "$build/bin/arfuse" bench --algo auto --ranks $ngpu \
    --tokens 1,16,256,2048 -n 20 --nccl-sweep -J "$OUT/bench_nccl_sweep_tp${ngpu}.json"
  note "bench nccl-sweep: rc=$? $(grep -c 'best NCCL setting' "$OUT/bench_nccl_sweep.txt") summary lines"
  grep 'best NCCL setting' "$OUT/bench_nccl_sweep.txt" >> "$summary"
fi
fi  # tests_only

# Sanitizers and the Python CPU tests (with this machine's torch) close either part, as time allows.
  # compute-sanitizer over a slice of the virtual-rank suite (every path, graphs, faults, epilogues).
  san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -n "$san" ]; then
    filt='Worlds/Gpu_VirtualRanks.GraphReplayWithNewInputs/3ranks_*:Gpu_VirtualRanks.HostStagedVariantsBySize:Paths/Gpu_Fault.DifferentSizeIsAMismatchOnEveryRank/*:Gpu_AddRmsNorm.*:Paths/Gpu_Epilogue.*/local:Paths/Gpu_Epilogue.*/lowlatency:Paths/Gpu_Epilogue.*/oneshot'
    for tool in memcheck racecheck; do
      step "compute-sanitizer $tool" 180 "$OUT/sanitizer_$tool.log" "$san" --tool $tool --error-exitcode 9 \
        "$build/tests/gpu/gpu_test" --gtest_filter="$filt"
      note "compute-sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/sanitizer_$tool.log" | tr '\n' ' ')"
    done
  else
    note "compute-sanitizer: not found on this machine"
  fi
  echo "== python (cpu label, with this machine's torch)" >> "$OUT/tests.log"; run_ctest cpu 150 python
[ -f "$OUT/bench.txt" ] && cat "$OUT/bench.txt" >> "$summary"
# The device tool brings back at most 8 files: keep summary.txt, pack the rest.
tgz=$(mktemp /tmp/gpu_check_logs.XXXXXX)
( cd "$OUT" && tar czf "$tgz" --exclude=summary.txt . ) || note "tar: failed"
find "$OUT" -mindepth 1 -maxdepth 1 ! -name summary.txt -exec rm -rf {} +
mv "$tgz" "$OUT/logs.tgz"
echo; grep -v '^ ' "$summary" | head -60
