#!/usr/bin/env bash
# Proves that a library carries real machine code (SASS) for every kernel on every compiled
# architecture: no `#if __CUDA_ARCH__` guard may compile a kernel body to nothing (a shipped
# anchor bug: "launch it, do nothing, return garbage" on SM12x).
# usage: check_fatbin.sh LIB "80;86;89;90;100;120" [PYTHON]   (PYTHON: whose pip-installed tools to try too)
# Exit: 0 ok, 1 a kernel is missing or empty for some arch, 77 cuobjdump/nvdisasm not available (skipped).
set -euo pipefail
lib=$1
archs=$2
python=${3:-}
min_instructions=${ARFUSE_MIN_SASS_INSTRUCTIONS:-64}

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
cuobjdump=$(find_tool cuobjdump || true)
nvdisasm=$(find_tool nvdisasm || true)
if [ -z "$cuobjdump" ] || [ -z "$nvdisasm" ]; then
  echo "SKIPPED: cuobjdump/nvdisasm not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, or a full CUDA toolkit); cannot inspect $lib"
  exit 77
fi
export PATH="$(dirname "$nvdisasm"):$PATH"

sass=$(mktemp)
trap 'rm -f "$sass"' EXIT
"$cuobjdump" --dump-sass "$lib" > "$sass"

# Per (arch, function): instruction count.
table=$(awk '
  /^[ \t]*arch = sm_/ { arch = $3 }
  /Function :/ { fn = $3; key = arch " " fn; seen[key] = 1; if (!(key in n)) n[key] = 0 }
  /^[ \t]+\/\*[0-9a-f]+\*\/ / { n[key]++ }
  END { for (k in seen) print k, n[k] }' "$sass" | sort)

fail=0
expected_fns=$(echo "$table" | awk '{print $2}' | sort -u)
nfns=$(echo "$expected_fns" | grep -c . || true)
if [ "$nfns" -eq 0 ]; then echo "FAIL: no kernels found in $lib"; exit 1; fi
for a in ${archs//;/ }; do
  a=${a%%-*}      # 90-real -> 90
  sm="sm_${a}"
  for fn in $expected_fns; do
    cnt=$(echo "$table" | awk -v s="$sm" -v f="$fn" '$1 == s && $2 == f {print $3}')
    if [ -z "$cnt" ]; then
      echo "FAIL: $sm has no machine code for $fn"; fail=1
    elif [ "$cnt" -lt "$min_instructions" ] && [[ "$fn" != *arfuse4topo* && "$fn" != *proof*Kernel* ]]; then
      # (the topology probe's copy/fill kernels and the init-time peer-access proof are legitimately
      # short; they still need SASS on every arch)
      echo "FAIL: $sm $fn has only $cnt instructions (empty body?)"; fail=1
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
