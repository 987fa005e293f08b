#!/usr/bin/env bash
# Compiler launcher of the library's CUDA objects (src/CMakeLists.txt): runs the compile command it is
# given (after any other launcher, e.g. ccache, which replays the compiler's stderr on a cache hit)
# and keeps ptxas's resource report (-Xptxas=-v: registers, stack frame, spill stores and loads of
# every kernel, per architecture) in OBJECT.ptxas next to the object, where
# tests/cpu/check_spills.py reads it. Only the report's lines are kept out of the console; warnings
# and errors pass through as they are.
# usage: ptxas_report.sh COMMAND... (the command contains "-o OBJECT")
set -u
out=""
prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out=$a
  prev=$a
done
[ -n "$out" ] || exec "$@"
tmp="$out.ptxas.tmp"
"$@" 2>"$tmp"
rc=$?
# "ptxas info" lines and the indented "N bytes stack frame, ..." line under each "Function properties".
awk '!/^ptxas info/ && !/^    [0-9]+ bytes stack frame/' "$tmp" >&2
if [ "$rc" -eq 0 ]; then
  mv -f "$tmp" "$out.ptxas"
else
  rm -f "$tmp" "$out.ptxas"
fi
exit "$rc"
