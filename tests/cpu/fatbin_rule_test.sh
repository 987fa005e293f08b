#!/usr/bin/env bash
# scripts/check_fatbin.sh's rule on a saved SASS dump (tests/cpu/fixtures/fatbin_rule.sass), so that
# it is checked where cuobjdump is not installed (CI): a kernel whose body an arch guard compiled away
# fails, a legitimately short kernel (one atomic, 32 instructions of which most are padding) passes.
# usage: fatbin_rule_test.sh REPO_ROOT
set -uo pipefail
root=$1
out=$(bash "$root/scripts/check_fatbin.sh" "$root/tests/cpu/fixtures/fatbin_rule.sass" 90 2>&1)
rc=$?
fail=0
[ "$rc" -eq 1 ] || { echo "FAIL: check_fatbin.sh exit $rc, want 1 (the empty kernel)"; fail=1; }
grep -qE '^FAIL: sm_90 _Z7guardedPfi writes no memory' <<<"$out" || { echo "FAIL: the empty kernel is not named"; fail=1; }
if grep -qE '^FAIL: .*stamp' <<<"$out"; then echo "FAIL: the short one-atomic kernel was refused"; fail=1; fi
[ "$(grep -c '^FAIL' <<<"$out")" -eq 1 ] || { echo "FAIL: want exactly one FAIL line"; fail=1; }
out2=$(bash "$root/scripts/check_fatbin.sh" "$root/tests/cpu/fixtures/fatbin_rule.sass" "90;100" 2>&1)
grep -qE '^FAIL: sm_100 has no machine code for _Z5stampPy' <<<"$out2" || { echo "FAIL: a missing arch is not named"; fail=1; }
sed 's/^/  /' <<<"$out"
[ $fail = 0 ] && echo "ok: the empty body fails, the short real kernel passes, a missing arch is named"
exit $fail
