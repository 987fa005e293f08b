#!/usr/bin/env bash
# Proves that a library carries real machine code (SASS) for every kernel on every compiled
# architecture: no `#if __CUDA_ARCH__` guard may compile a kernel body to nothing (a shipped
# anchor bug: "launch it, do nothing, return garbage" on SM12x). A body compiled to nothing has no
# instruction that writes memory (only EXIT / BRA / NOP), and a kernel that writes nothing does
# nothing a caller can see: so every kernel must hold at least one store, atomic or reduction to
# global or generic memory (STG, ST, ATOM[G], RED[G], the TMA stores). The instruction count is
# reported, not judged: a one-thread stamp kernel is legitimately 32 instructions.
# usage: check_fatbin.sh LIB "80;86;89;90;100;120" [PYTHON]   (PYTHON: whose pip-installed tools to try too)
#        LIB may be a saved `cuobjdump --dump-sass` (a name ending in .sass): the rule is then checked
#        without the tools (tests/cpu cpu_fatbin_rule, on tests/cpu/fixtures/fatbin_rule.sass)
# Exit: 0 ok, 1 a kernel is missing or empty for some arch, 77 cuobjdump/nvdisasm not available (skipped).
set -euo pipefail
lib=$1
archs=$2
python=${3:-}

find_tool() {
  local name=$1 dir
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return; fi
  for dir in "${CUDA_HOME:-/usr/local/cuda}/bin" /usr/local/cuda/bin; do
    [ -x "$dir/$name" ] && { echo "$dir/$name"; return; }
  done
  for py in $python python3 python; do
    command -v "$py" >/dev/null 2>&1 || continue
    dir=$("$py" -c 'import nvidia, os; [print(os.path.join(p, "cu13", "bin")) for p in nvidia.__path__]' 2>/dev/null | head -1)
    [ -n "$dir" ] && [ -x "$dir/$name" ] && { echo "$dir/$name"; return; }
  done
}
sass=$(mktemp)
trap 'rm -f "$sass"' EXIT
if [[ "$lib" == *.sass ]]; then
  [ -r "$lib" ] || { echo "FAIL: cannot read the SASS dump $lib"; exit 1; }
  cp "$lib" "$sass"
else
  cuobjdump=$(find_tool cuobjdump || true)
  nvdisasm=$(find_tool nvdisasm || true)
  if [ -z "$cuobjdump" ] || [ -z "$nvdisasm" ]; then
    echo "SKIPPED: cuobjdump/nvdisasm not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, or a full CUDA toolkit); cannot inspect $lib"
    exit 77
  fi
  export PATH="$(dirname "$nvdisasm"):$PATH"
  "$cuobjdump" --dump-sass "$lib" > "$sass"
fi

# Per (arch, function): instruction count, and how many of them write memory (the opcode after an
# optional predicate, its modifiers cut at the first dot).
table=$(awk '
  /^[ \t]*arch = sm_/ { arch = $3 }
  /Function :/ { fn = $3; key = arch " " fn; seen[key] = 1; if (!(key in n)) { n[key] = 0; w[key] = 0 } }
  /^[ \t]+\/\*[0-9a-f]+\*\/ / {
    n[key]++
    ins = $0
    sub(/^[ \t]+\/\*[0-9a-f]+\*\/[ \t]+/, "", ins)
    sub(/^@!?U?P[T0-9]+[ \t]+/, "", ins)
    split(ins, t, /[ .\t;]/)
    if (t[1] ~ /^(STG|ST|ATOM|ATOMG|RED|REDG|UTMASTG|UTMAREDG|UBLKCP)$/) w[key]++
  }
  END { for (k in seen) print k, n[k], w[k] }' "$sass" | sort)

fail=0
expected_fns=$(echo "$table" | awk '{print $2}' | sort -u)
nfns=$(echo "$expected_fns" | grep -c . || true)
if [ "$nfns" -eq 0 ]; then echo "FAIL: no kernels found in $lib"; exit 1; fi
for a in ${archs//;/ }; do
  a=${a%%-*}      # 90-real -> 90
  sm="sm_${a}"
  for fn in $expected_fns; do
    row=$(echo "$table" | awk -v s="$sm" -v f="$fn" '$1 == s && $2 == f {print $3, $4}')
    if [ -z "$row" ]; then
      echo "FAIL: $sm has no machine code for $fn"; fail=1
    elif [ "${row#* }" -eq 0 ]; then
      echo "FAIL: $sm $fn writes no memory in its ${row% *} instructions (a body compiled to nothing?)"; fail=1
    fi
  done
  echo "$sm: $(echo "$table" | awk -v s="$sm" '$1 == s' | wc -l) kernels, fewest instructions $(echo "$table" | awk -v s="$sm" '$1 == s {print $3}' | sort -n | head -1)"
done
# Blackwell family/arch-specific targets must carry the hardware FP4 conversion of the NVFP4 epilogue
# (F2FP ... E2M1); elsewhere the exact software conversion is compiled instead.
for a in ${archs//;/ }; do
  a=${a%%-*}
  case "$a" in
    1[0-9][0-9][af])
      n=$(awk -v s="sm_$a" '/arch = sm_/ { cur = $3 } cur == s && /F2FP[.A-Z0-9_]*E2M1/ { c++ } END { print c + 0 }' "$sass")
      if [ "$n" -eq 0 ]; then echo "FAIL: sm_$a has no F2FP.*E2M1 instruction (hardware FP4 conversion)"; fail=1
      else echo "sm_$a: $n F2FP.*E2M1 (hardware FP4 conversion) instructions"; fi ;;
  esac
done
[ $fail -eq 0 ] && echo "OK: $nfns kernels have real SASS on every arch in ($archs)"
exit $fail
