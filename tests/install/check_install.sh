#!/usr/bin/env bash
# An installed prefix works on its own: `cmake --install` into a fresh folder, then
#   - bin/arfuse runs from there (RUNPATH finds lib/libarfuse.so.0) and, without a GPU, `selftest`
#     says so and exits 3;
#   - a tiny C program builds against the prefix with find_package(arfuse) and with pkg-config, and
#     runs without LD_LIBRARY_PATH, also after the prefix is moved.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR [CMAKE] [C_COMPILER]
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd) cmake=${3:-cmake} cc=${4:-cc}
work=$build/_install_check
rm -rf "$work" && mkdir -p "$work"
prefix=$work/prefix

"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log"
for f in bin/arfuse include/arfuse/arfuse.h lib/libarfuse.so.0 lib/cmake/arfuse/arfuseConfig.cmake lib/pkgconfig/arfuse.pc; do
  [ -e "$prefix/$f" ] || { echo "FAIL: the prefix has no $f"; exit 1; }
done

# No LD_LIBRARY_PATH: the installed binary must find its library by itself.
out=$(env -u LD_LIBRARY_PATH "$prefix/bin/arfuse" version) || { echo "FAIL: $prefix/bin/arfuse version: $out"; exit 1; }
echo "$out" | sed 's/^/  /'
if echo "$out" | grep -q "devices: none visible"; then
  set +e
  st=$(env -u LD_LIBRARY_PATH "$prefix/bin/arfuse" selftest 2>&1)
  rc=$?
  set -e
  echo "$st" | sed 's/^/  /'
  [ $rc -eq 3 ] || { echo "FAIL: arfuse selftest without a GPU exited $rc, not 3"; exit 1; }
  echo "$st" | grep -q "no CUDA device is visible" || { echo "FAIL: selftest did not say why it cannot run"; exit 1; }
  echo "ok: installed arfuse selftest without a GPU says so and exits 3"
else
  echo "ok: installed arfuse runs (a GPU is visible: selftest is left to the GPU tests)"
fi

"$cmake" -S "$src/tests/install/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" >"$work/consumer-configure.log" || { cat "$work/consumer-configure.log"; exit 1; }
"$cmake" --build "$work/consumer" >"$work/consumer-build.log" || { cat "$work/consumer-build.log"; exit 1; }
"$work/consumer/consumer"
echo "ok: find_package(arfuse) consumer"

# pkg-config: exactly what `pkg-config --cflags --libs arfuse` gives, nothing added, and the program
# runs with no LD_LIBRARY_PATH (the .pc's Libs carry the prefix's rpath); then again after the
# prefix is moved (the .pc's paths are relative to its own folder).
if command -v pkg-config >/dev/null 2>&1; then
  pc_consumer() {  # pc_consumer PREFIX OUT
    # shellcheck disable=SC2046
    "$cc" -std=c99 -Wall -Werror "$src/tests/install/consumer/consumer.c" -o "$2" \
      $(PKG_CONFIG_PATH="$1/lib/pkgconfig" pkg-config --cflags --libs arfuse)
    env -u LD_LIBRARY_PATH "$2"
  }
  echo "  pkg-config --libs arfuse: $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --libs arfuse)"
  pc_consumer "$prefix" "$work/consumer-pc"
  echo "ok: pkg-config consumer runs without LD_LIBRARY_PATH"
  mv "$prefix" "$work/moved"
  pc_consumer "$work/moved" "$work/consumer-pc-moved"
  env -u LD_LIBRARY_PATH "$work/moved/bin/arfuse" version >/dev/null
  echo "ok: a moved prefix: bin/arfuse and a pkg-config consumer still find the library"
else
  echo "SKIPPED pkg-config consumer: pkg-config is not installed (apt-get install pkg-config)"
fi
