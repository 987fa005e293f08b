#!/usr/bin/env bash
# The CLI's usage errors and help, through the real binary: a bad argument of any subcommand is one
# line naming it and exit 2; --help is exit 0; `triage` with no LOG on a terminal refuses to wait.
# Usage: cli_usage.sh ARFUSE
arfuse=$1
fail=0
expect() {  # expect RC PATTERN ARGS...: exit code RC and PATTERN in stdout+stderr
  local want=$1 pattern=$2
  shift 2
  local out rc
  out=$("$arfuse" "$@" 2>&1 </dev/null)
  rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: arfuse $* -> exit $rc (want $want), output must match '$pattern':"
    sed 's/^/    /' <<<"$out" | head -8
    fail=1
  else
    echo "ok: arfuse $* -> $rc"
  fi
}
expect 2 "^arfuse plan: --ranks wants a whole number from 1 to 16, got '8x'" plan --ranks 8x
expect 2 "--tokens wants a comma-separated list" plan --tokens abc
expect 2 "'a' is not one" plan --topology x.json --devices a,b
expect 2 "^arfuse plan: --hidden wants a whole number" plan --hidden -5
expect 2 "hidden=12: must be a positive multiple of 8" plan --hidden 12
expect 2 "--algo wants auto, local, lowlatency, hoststaged, hierarchical, nccl, oneshot or twoshot" plan --algo fast
expect 0 "^usage: arfuse plan" plan --help
expect 0 "^assumed machine \(no --topology" plan --ranks 4 --tokens 1
expect 0 "hoststaged \(one-shot variant\): no peer access between ranks \(--no-p2p given\)" plan --no-p2p --tokens 1
expect 2 "^arfuse env: unknown argument '--bogus'" env --bogus
expect 0 "^usage: arfuse env" env --help
expect 2 "^arfuse version: unknown argument '--bogus'" version --bogus
expect 0 "^usage: arfuse version" version --help
expect 2 "^arfuse: unknown command 'bogus'" bogus
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
