#!/usr/bin/env bash
# scripts/setup.sh --dry-run names exactly what the build needs and this machine lacks:
#   1. a machine with only the CUDA toolkit (an empty dpkg database under --root, a toolkit without
#      NCCL): every Debian package the build needs, a venv, pytest, scikit-build-core and NCCL's
#      wheel for the toolkit's CUDA major;
#   2. this machine's packages less one (libre2-dev's entry taken out of a copy of the dpkg
#      database): that one package, plus whatever this machine really lacks;
#   3. no nvcc at all: no NCCL (the CPU-only build does not need it);
#   4. this machine as it is: only what it really lacks, NCCL not at all when the toolkit has it;
# and the README's apt-get line names the same packages. A dry run creates no venv (checked).
# Usage: setup_dry_run.sh SOURCE_DIR WORK_DIR
set -uo pipefail
src=$1 work=$2
setup=$src/scripts/setup.sh
# What the build and its tests need from Debian (the README says why for each).
need="cmake ninja-build g++ libgtest-dev zlib1g-dev liblzma-dev libre2-dev libssl3 xz-utils binutils pkg-config python3 python3-venv clang-format"
fail=0
check() {  # check WHAT OUTPUT LINE [-E]: the output has exactly LINE (a regular expression with -E)
  if grep -qx "${4:--F}" -e "$3" <<<"$2"; then
    echo "ok: $1"
  else
    echo "FAIL: $1: no line matching '$3' in:"
    sed 's/^/    /' <<<"$2"
    fail=1
  fi
}
absent() {  # absent WHAT OUTPUT PATTERN
  if grep -qE -- "$3" <<<"$2"; then
    echo "FAIL: $1: '$3' must not appear in:"
    sed 's/^/    /' <<<"$2"
    fail=1
  else
    echo "ok: $1"
  fi
}
run() { env -u VIRTUAL_ENV -u NCCL_ROOT -u NCCL_HOME "$@" 2>&1; }

rm -rf "$work" && mkdir -p "$work"
# A CUDA 13.0 toolkit without NCCL: an nvcc that answers --version, and an empty include/.
mkdir -p "$work/cuda/bin" "$work/cuda/include"
printf '#!/bin/sh\necho "Cuda compilation tools, release 13.0, V13.0.88"\n' >"$work/cuda/bin/nvcc"
chmod +x "$work/cuda/bin/nvcc"
mkdir -p "$work/empty/var/lib/dpkg" && : >"$work/empty/var/lib/dpkg/status"
had_venv=$([ -e "$src/.venv" ] && echo yes)

# 1. Nothing installed but the toolkit.
out=$(run PATH="$work/cuda/bin:/usr/bin:/bin" bash "$setup" --dry-run --root="$work/empty" --venv="$work/venv1")
check "nothing installed: every Debian package the build needs" "$out" "setup: would install Debian packages: $need"
check "nothing installed: a venv" "$out" "setup: would create the venv $work/venv1"
check "nothing installed: pytest, scikit-build-core and NCCL's wheel for CUDA 13" "$out" \
  "setup: would install into $work/venv1: pytest scikit-build-core>=0.11.6 nvidia-nccl-cu13"

# What this machine really lacks (in the order of the list).
real_missing=""
for p in $need; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || real_missing+=" $p"
done

# 2. Everything this machine has, less libre2-dev.
if command -v dpkg-query >/dev/null 2>&1 && [ -f /var/lib/dpkg/status ]; then
  mkdir -p "$work/less/var/lib/dpkg/updates"
  awk -v RS= -v ORS='\n\n' '!/^Package: libre2-dev\n/' /var/lib/dpkg/status >"$work/less/var/lib/dpkg/status"
  want=""
  for p in $need; do
    [[ " $real_missing " == *" $p "* || $p == libre2-dev ]] && want+=" $p"
  done
  out=$(run PATH="$work/cuda/bin:/usr/bin:/bin" bash "$setup" --dry-run --root="$work/less" --venv="$work/venv2")
  check "all but libre2-dev: exactly what is missing" "$out" "setup: would install Debian packages:$want"
else
  echo "SKIPPED the one-package-less case: no dpkg database here"
fi

# 3. No nvcc anywhere: no NCCL wanted.
if PATH="$work/empty:/usr/bin:/bin" command -v nvcc >/dev/null 2>&1; then
  echo "SKIPPED the no-nvcc case: this machine has an nvcc in /usr/bin or /bin"
else
  out=$(run PATH="/usr/bin:/bin" bash "$setup" --dry-run --root="$work/empty" --venv="$work/venv3")
  check "no nvcc: it says the build is the CPU-only one" "$out" "setup: CUDA: no nvcc .*CPU-only.*" -E
  absent "no nvcc: no NCCL" "$out" "nvidia-nccl"
fi

# 4. This machine as it is.
out=$(run bash "$setup" --dry-run --venv="$work/venv4")
if [ -z "$real_missing" ]; then
  check "this machine: no Debian package" "$out" "setup: Debian packages: all [0-9]+ installed" -E
else
  check "this machine: what it lacks" "$out" "setup: would install Debian packages:$real_missing"
fi
if grep -q "^setup: NCCL: " <<<"$out"; then
  absent "this machine has NCCL: no wheel" "$out" "nvidia-nccl"
fi

# The README's apt-get line is the same list.
readme=$(grep -oE "apt-get install [a-z0-9+. -]+" "$src/README.md" | head -1 | sed 's/^apt-get install //; s/ *$//')
if [ "$(tr ' ' '\n' <<<"$readme" | sort)" = "$(tr ' ' '\n' <<<"$need" | sort)" ]; then
  echo "ok: the README's apt-get line names the same packages"
else
  echo "FAIL: the README's apt-get line ($readme) is not the list the build needs ($need)"
  fail=1
fi

for v in venv1 venv2 venv3 venv4; do
  [ -e "$work/$v" ] && { echo "FAIL: a dry run created $work/$v"; fail=1; }
done
[ "$(! [ -e "$src/.venv" ] || echo yes)" = "$had_venv" ] || { echo "FAIL: a dry run created $src/.venv"; fail=1; }
exit $fail
