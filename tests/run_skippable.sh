#!/usr/bin/env bash
# run_skippable.sh CODE COMMAND...: runs COMMAND; when it exits CODE (its "cannot run here" exit,
# e.g. `arfuse selftest` without a GPU exits 3), prints "SKIPPED: <its first lines>" so the
# reason reaches ctest's skip report, and exits CODE, which the test's SKIP_RETURN_CODE turns into
# "Skipped" - never into a pass.
code=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq "$code" ]; then
  echo "SKIPPED: $(printf '%s\n' "$out" | head -n 3 | tr -s ' \n' ' ' | sed 's/ *$//')"
fi
exit "$rc"
