# Sourced by the CLI tests: expect RC PATTERN ARGS... runs "$arfuse" ARGS (stdin from /dev/null)
# and wants exit code RC and PATTERN (grep -E) in its stdout+stderr; prints ok or FAIL (with the
# output) and sets fail=1 on a mismatch. The sourcing script sets $arfuse and ends with exit $fail.
fail=0
expect() {
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
