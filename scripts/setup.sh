#!/usr/bin/env bash
# scripts/setup.sh: installs what building and testing arfuse needs and is missing here; run again,
# it installs nothing. The README's commands and .ci/run start with it (one copy of this logic).
#
#   Debian packages  apt-get install (needs root: run as root, or it uses sudo when there is one)
#   CUDA toolkit     not installed here (NVIDIA's repository); without nvcc the build is the CPU-only
#                    one (arfuse triage, plan, env) and NCCL is not needed
#   NCCL             the toolkit's or the system's when present, else NVIDIA's wheel in the venv
#   pytest, scikit-build-core   in the venv (the Python tests; the pure-wheel test)
#   cuobjdump, nvdisasm         optional (the SASS check), the toolkit's major.minor from PyPI
#
# The venv: the active one ($VIRTUAL_ENV), else --venv=DIR, else .venv in the checkout, which CMake
# then uses by itself (top-level CMakeLists.txt), so no activation is needed. Nothing here needs root
# but apt-get.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/setup.sh [--dry-run] [--venv=DIR] [--with-ccache] [--with-fuzz] [--root=DIR]
  Installs the Debian packages, NCCL, pytest and scikit-build-core that building and testing arfuse
  need and this machine lacks (idempotent: a second run installs nothing).
  --dry-run      say what would be installed, change nothing
  --venv=DIR     the venv for the Python tools and NCCL's wheel (default: the active venv, else
                 .venv in the checkout, which CMake finds by itself)
  --with-ccache  also ccache (CI: the builds then share their objects)
  --with-fuzz    also clang, whose libFuzzer fuzz/run.sh builds the fuzz targets with (CI runs them)
  --root=DIR     judge the system under DIR instead of / (its dpkg database and system folders;
                 for tests: an empty DIR is a machine with nothing installed)
  Exit status: 0 done (or nothing to do), 1 something could not be installed, 2 usage error.
EOF
}

dry=0 venv_opt="" root="" ccache=0 fuzz=0
for a in "$@"; do
  case "$a" in
    --dry-run) dry=1 ;;
    --venv=?*) venv_opt=${a#--venv=} ;;
    --root=?*) root=${a#--root=} ;;
    --with-ccache) ccache=1 ;;
    --with-fuzz) fuzz=1 ;;
    -h | --help) usage; exit 0 ;;
    --venv | --root) echo "setup: $a needs a value ($a=DIR) (see scripts/setup.sh --help)" >&2; exit 2 ;;
    *) echo "setup: unknown option '$a' (see scripts/setup.sh --help)" >&2; exit 2 ;;
  esac
done
repo=$(cd "$(dirname "$0")/.." && pwd)
say() { echo "setup: $*"; }

# What the build and the tests need from Debian, each for a reason (README, "Prerequisites").
debian=(cmake ninja-build g++ libgtest-dev zlib1g-dev liblzma-dev libre2-dev libssl3 xz-utils binutils pkg-config
        python3 python3-venv clang-format)
[ $ccache -eq 1 ] && debian+=(ccache)
[ $fuzz -eq 1 ] && debian+=(clang)

installed() {  # installed PKG: dpkg says "install ok installed"
  local admin=()
  [ -n "$root" ] && admin=(--admindir="$root/var/lib/dpkg")
  [ "$(dpkg-query "${admin[@]}" -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}
missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${debian[@]}"; do installed "$p" || missing+=("$p"); done
  if [ ${#missing[@]} -eq 0 ]; then
    say "Debian packages: all ${#debian[@]} installed"
  elif [ $dry -eq 1 ]; then
    say "would install Debian packages: ${missing[*]}"
  fi
else
  say "no dpkg here (not Debian/Ubuntu): install the equivalents of ${debian[*]} yourself"
fi

# The CUDA toolkit: nvcc on PATH, else the default location.
nvcc=$(command -v nvcc 2>/dev/null || true) nvcc_off_path=0
if [ -z "$nvcc" ] && [ -x "$root/usr/local/cuda/bin/nvcc" ]; then
  nvcc=$root/usr/local/cuda/bin/nvcc nvcc_off_path=1
fi
cuda_ver="" cuda_root=""
if [ -n "$nvcc" ]; then
  cuda_ver=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
  cuda_root=$(cd "$(dirname "$nvcc")/.." && pwd)
  say "CUDA: $cuda_ver at $cuda_root"
  [ $nvcc_off_path -eq 0 ] || say "  (not on PATH; the configure finds it in /usr/local/cuda/bin by itself)"
else
  say "CUDA: no nvcc (PATH, /usr/local/cuda/bin): the build will be the CPU-only one (arfuse triage, plan, env);" \
      "install NVIDIA's CUDA toolkit 12.8 or later for the library, selftest, bench and doctor"
fi

# The venv and what it holds.
if [ -n "${VIRTUAL_ENV:-}" ]; then
  venv=$VIRTUAL_ENV
elif [ -n "$venv_opt" ]; then
  venv=$venv_opt
else
  venv=$repo/.venv
fi
py=$venv/bin/python3
has() { [ -x "$py" ] && "$py" -c "import $1" >/dev/null 2>&1; }
pip_want=()
has pytest || pip_want+=(pytest)
has scikit_build_core || pip_want+=("scikit-build-core>=0.11.6")

# NCCL, where FindNCCL looks: NCCL_ROOT, the toolkit, the system, the venv's wheel.
nccl=""
if [ -n "$nvcc" ]; then
  for d in ${NCCL_ROOT:+"$NCCL_ROOT"} ${NCCL_HOME:+"$NCCL_HOME"} "$cuda_root" "$root/usr" "$root/usr/local"; do
    if [ -f "$d/include/nccl.h" ] && compgen -G "$d/lib*/libnccl.so*" >/dev/null ||
      { [ -f "$d/include/nccl.h" ] && compgen -G "$d/lib/*/libnccl.so*" >/dev/null; }; then
      nccl="$d"
      break
    fi
  done
  if [ -n "$nccl" ]; then
    say "NCCL: $nccl"
  elif has nvidia.nccl; then
    say "NCCL: NVIDIA's wheel in $venv"
  else
    pip_want+=("nvidia-nccl-cu${cuda_ver%%.*}")
  fi
fi
# cuobjdump/nvdisasm of the toolkit's own major.minor, for the SASS check (optional: PyPI has 13.2 on).
pip_try=()
if [ -n "$nvcc" ] && ! command -v cuobjdump >/dev/null 2>&1 && [ ! -x "$cuda_root/bin/cuobjdump" ] &&
  ! compgen -G "$venv/lib/python*/site-packages/nvidia/cu*/bin/cuobjdump" >/dev/null; then
  pip_try=("nvidia-cuda-cuobjdump==$cuda_ver.*" "nvidia-cuda-nvdisasm==$cuda_ver.*")
fi

if [ $dry -eq 1 ]; then
  [ -x "$py" ] || [ ${#pip_want[@]} -eq 0 ] || say "would create the venv $venv"
  [ ${#pip_want[@]} -gt 0 ] && say "would install into $venv: ${pip_want[*]}"
  [ ${#pip_try[@]} -gt 0 ] && say "would try (optional, the SASS check): ${pip_try[*]}"
  [ ${#missing[@]} -eq 0 ] && [ ${#pip_want[@]} -eq 0 ] && say "nothing to install"
  say "dry run: nothing was changed"
  exit 0
fi

if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || { say "no apt-get to install ${missing[*]}"; exit 1; }
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || {
      say "installing Debian packages needs root: run as root: apt-get install -y ${missing[*]}"
      exit 1
    }
    sudo=(sudo)
    say "apt-get needs root: using sudo"
  fi
  say "installing Debian packages: ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi
if [ ${#pip_want[@]} -gt 0 ] || [ ${#pip_try[@]} -gt 0 ]; then
  if [ ! -x "$py" ]; then
    say "creating the venv $venv"
    python3 -m venv "$venv"
  fi
  pip() { "$py" -m pip -q --disable-pip-version-check "$@"; }
  if [ ${#pip_want[@]} -gt 0 ]; then
    say "installing into $venv: ${pip_want[*]}"
    pip install "${pip_want[@]}"
  fi
  if [ ${#pip_try[@]} -gt 0 ]; then
    pip install "${pip_try[@]}" >/dev/null 2>&1 ||
      say "no ${pip_try[*]} on PyPI (NVIDIA's apt repository has cuda-cuobjdump-${cuda_ver/./-}):" \
          "the SASS check will report itself skipped"
  fi
fi
[ ${#missing[@]} -eq 0 ] && [ ${#pip_want[@]} -eq 0 ] && say "nothing to install"
say "ready: cmake -S . -B build -G Ninja && cmake --build build"
