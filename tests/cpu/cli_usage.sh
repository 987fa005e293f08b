#!/usr/bin/env bash
# The CLI's usage errors and help, through the real binary: a bad argument of any subcommand is one
# line naming it and exit 2; --help is exit 0; `triage` with no LOG on a terminal refuses to wait.
# Usage: cli_usage.sh ARFUSE
arfuse=$1
. "$(dirname "$0")/expect.sh"
# One wording for one mistake, whichever subcommand makes it.
expect 2 "^arfuse plan: --ranks wants a whole number from 1 to 16, got '8x' \(see arfuse plan --help\)" plan --ranks 8x
expect 2 "^arfuse plan: --ranks wants a whole number from 1 to 16, got '8x'" plan --ranks=8x
expect 2 "^arfuse plan: --tokens wants a comma-separated list of whole numbers from 1 to 1048576, got 'abc'" plan --tokens abc
expect 2 "^arfuse bench: --tokens wants a comma-separated list of whole numbers from 1 to 1048576, got 'abc'" bench --tokens abc
expect 2 "^arfuse doctor: --tokens wants a comma-separated list of whole numbers from 1 to 1048576, got 'abc'" doctor --tokens=abc
expect 2 "'a' is not one" plan --topology x.json --devices a,b
expect 2 "^arfuse plan: --hidden wants a multiple of 8 from 8 to 1048576, got '-5'" plan --hidden -5
expect 2 "^arfuse bench: --hidden wants a multiple of 8 from 8 to 1048576, got '12'" bench --hidden=12
expect 2 "^arfuse doctor: --hidden wants a multiple of 8 from 8 to 1048576, got '12'" doctor --hidden 12
expect 2 "^arfuse plan: --algo wants auto, local, lowlatency, hoststaged, hierarchical, nccl, oneshot or twoshot, got 'fast'" plan --algo fast
expect 2 "^arfuse selftest --procs: --algo wants auto, local, lowlatency, hoststaged, hierarchical, nccl, oneshot or twoshot, got 'fast' \(see arfuse selftest --help\)" selftest --procs=2 --algo=fast
expect 2 "^arfuse bench: --algo wants all, or a comma-separated list of auto, local, lowlatency, hoststaged, hierarchical, nccl, oneshot, twoshot or nccl-symm, got 'fast'" bench --algo fast
for cmd in plan bench doctor selftest env version; do
  expect 2 "^arfuse $cmd: unknown option '--bogus' \(see arfuse $cmd --help\)" $cmd --bogus
  expect 2 "^arfuse $cmd: unexpected argument 'bogus' \(see arfuse $cmd --help\)" $cmd bogus
done
expect 2 "^arfuse triage: unknown option '--bogus' \(see arfuse triage --help\)" triage --bogus
expect 2 "^arfuse plan: --ranks needs a value" plan --ranks
expect 2 "^arfuse triage: --context needs a value" triage --context
expect 2 "^arfuse plan: --virtual takes no value, got '--virtual=1'" plan --virtual=1
# --flag=value everywhere, and short options' -xVALUE.
expect 0 "^assumed machine \(no --topology.*4 GPUs, one rank each" plan --ranks=4 --tokens=1 --hidden=4096 --dtype=fp16
expect 0 "lowlatency" plan --ranks 4 --tokens 1
expect 0 "^assumed machine \(no --topology.*1 GPU, 132 SMs" plan --ranks=1 --tokens=1
expect 0 "1 GPU holding 2 virtual ranks" plan --ranks=2 --virtual --tokens=1
expect 0 "hoststaged \(one-shot variant\): no peer access between ranks \(--no-p2p given\)" plan --no-p2p --tokens 1
expect 0 "VERDICT" triage --context=2 "$(dirname "$0")/../triage/fixtures/arfuse_divergent_call.log"
# Without a GPU, selftest and selftest --procs give the same hint (exit 3).
expect 3 "^arfuse selftest: no CUDA device is visible, so nothing can be tested here" selftest
expect 3 "^arfuse selftest --procs: no CUDA device is visible, so nothing can be tested here" selftest --procs=2
# Every --help: exit 0, a usage line, and the exit status it uses.
for cmd in plan bench doctor selftest triage env version; do
  expect 0 "^usage: arfuse $cmd" $cmd --help
  expect 0 "Exit status: 0 " $cmd --help
done
expect 0 "^usage: arfuse selftest" selftest --procs=2 --help
expect 0 "Exit status: 0 success" --help
expect 2 "^arfuse: unknown command 'bogus' \(see arfuse --help\)" bogus
# The README's command table names every subcommand `arfuse --help` lists, and every algorithm
# --algo takes (bench's too).
readme=$(dirname "$0")/../../README.md
table=$(sed -n '/^## The tool/,/^## /p' "$readme")
for cmd in $("$arfuse" --help | awk '/^commands:/ {f = 1; next} f && /^  [a-z]/ {print $1}'); do
  if grep -q "^| \`arfuse $cmd" <<<"$table"; then echo "ok: the README's table has arfuse $cmd"; else
    echo "FAIL: the README's command table has no row for arfuse $cmd"; fail=1; fi
done
# (the names as bench's error lists them: the registry's paths, auto, nccl-symm)
algos=$("$arfuse" bench --algo=fast 2>&1 | sed -n "s/.*a comma-separated list of \(.*\), got 'fast'.*/\1/p" | sed 's/ or /, /; s/,//g')
[ -n "$algos" ] || { echo "FAIL: bench --algo=fast did not list the algorithms"; fail=1; }
for algo in $algos; do
  if grep -q "\`$algo\`" <<<"$table"; then echo "ok: the README's table names --algo $algo"; else
    echo "FAIL: the README's command table does not name the algorithm $algo"; fail=1; fi
done
if command -v script >/dev/null 2>&1; then
  out=$(timeout 20 script -qec "$arfuse triage" /dev/null 2>&1)
  rc=$?
  if [ $rc -eq 2 ] && grep -q "no LOG given and stdin is a terminal" <<<"$out"; then
    echo "ok: arfuse triage on a terminal -> 2"
  else
    echo "FAIL: arfuse triage with no LOG on a terminal -> exit $rc (want 2, no wait): $out"
    fail=1
  fi
else
  echo "SKIPPED triage-on-a-terminal check: no \`script\` (util-linux) to give it a terminal"
fi
exit $fail
