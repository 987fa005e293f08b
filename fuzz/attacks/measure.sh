#!/usr/bin/env bash
# Issue 37's hostile inputs through the real CLI, each under `ulimit -v 2097152` (2 GiB of address
# space) and /usr/bin/time -v: prints one line per case with its exit status, wall time and peak RSS.
#   fuzz/attacks/measure.sh BUILD_DIR [CASE...]     (cases: json plan-cal cr cr-gz; default: all)
# Sizes scale with ATTACK_SCALE (1 = the issue's sizes: 160k keys, 100 MB and 1 GB of '\r').
# WORK (default: a temporary directory) keeps the generated files between runs.
set -uo pipefail
build=${1:?usage: measure.sh BUILD_DIR [CASE...]}
shift
cli=$build/bin/arfuse
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${WORK:-$(mktemp -d)}
scale=${ATTACK_SCALE:-1}
cases=("$@")
[ ${#cases[@]} -eq 0 ] && cases=(json plan-cal cr cr-gz)
fixture=$root/tests/topo/fixtures/h200_4x_recorded.json

run() {  # LABEL CMD...: one line of figures
  local label=$1
  shift
  local t="$work/time.$$"
  (ulimit -v 2097152; /usr/bin/time -v "$@" >"$work/out.$$" 2>"$t")
  local rc=$?
  local wall rss user sys
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$t")
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$t")
  user=$(sed -n 's/.*User time (seconds): //p' "$t")
  sys=$(sed -n 's/.*System time (seconds): //p' "$t")
  # CPU time (user + system) is the figure to compare on a shared machine; wall time follows the load.
  printf '%-38s exit %-3s cpu %8.2f s  wall %-9s peak RSS %5d MB  %s\n' "$label" "$rc" \
    "$(echo "$user + $sys" | bc)" "$wall" $((rss / 1024)) \
    "$(grep -v '^\s' "$t" | grep -v 'Command being timed\|Command exited' | head -c 100 | tr '\n' ' ')"
}

for c in "${cases[@]}"; do
  case $c in
    json)
      n=$((160000 * scale))
      f=$work/collide_$n.json
      [ -f "$f" ] || python3 "$here/gen.py" json-collide "$n" "$f"
      run "plan --topology ($n keys)" "$cli" plan --topology "$f"
      ;;
    plan-cal)
      n=$((160000 * scale))
      f=$work/collide_$n.json
      [ -f "$f" ] || python3 "$here/gen.py" json-collide "$n" "$f"
      run "ARFUSE_CALIBRATION_FILE ($n keys)" env ARFUSE_CALIBRATION_FILE="$f" "$cli" plan --topology "$fixture"
      ;;
    cr)
      mb=$((100 * scale))
      f=$work/cr_$mb.log
      [ -f "$f" ] || python3 "$here/gen.py" cr "$mb" "$f"
      run "triage ${mb} MB of \\r" "$cli" triage "$f"
      ;;
    cr-gz)
      mb=$((1000 * scale))
      f=$work/cr_$mb.log.gz
      [ -f "$f" ] || python3 "$here/gen.py" cr-gz "$mb" "$f"
      run "triage gzip of ${mb} MB of \\r" "$cli" triage "$f"
      ;;
    *) echo "unknown case $c" >&2 ;;
  esac
done
[ -z "${WORK:-}" ] && rm -rf "$work"
