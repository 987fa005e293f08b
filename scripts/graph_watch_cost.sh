#!/usr/bin/env bash
# What the captured-NCCL watch (ARFUSE_NCCL_WATCH_GRAPHS, docs/multihost.md) costs per call: the same
# bench -- one process per rank on simulated hosts, every call timed in CUDA-graph replays, the
# hierarchical and nccl paths across hosts -- with the watch off and on, then the difference per row.
# One GPU is enough (4 processes share it: a PROXY for the added kernel's own cost, which is what is
# asked; absolute times are not performance figures).
#   scripts/graph_watch_cost.sh BUILD_DIR [OUT_DIR]     (defaults: build, $OUT or .)
# Four processes time-slicing one GPU make every call slow (a context switch each): bench's default
# counts took over 120 s for the first setting on the H200, so the counts are gpu_check.sh's for
# `bench --hosts` (GRAPH_WATCH_ARGS replaces them; --procs-timeout bounds each setting).
# Writes OUT_DIR/graph_watch_off.json, graph_watch_on.json and graph_watch_cost.json, whose rows are
# {algo, tokens, off_us, on_us, added_us}; prints them.
set -euo pipefail
build=${1:-build}
out=${2:-${OUT:-.}}
cli=$build/bin/arfuse
mkdir -p "$out"
for w in 0 1; do
  name=$([ $w = 1 ] && echo on || echo off)
  # shellcheck disable=SC2086  # GRAPH_WATCH_ARGS: words for bench
  ARFUSE_NCCL_WATCH_GRAPHS=$w "$cli" bench --procs 4 --hosts 2 --algo hierarchical,nccl --tokens 1,16,256 \
    ${GRAPH_WATCH_ARGS:--n 5 -w 1 --calls 4 --procs-timeout 100} -J "$out/graph_watch_$name.json" >"$out/graph_watch_$name.txt" 2>&1 ||
    { cat "$out/graph_watch_$name.txt"; echo "graph_watch_cost: the bench with ARFUSE_NCCL_WATCH_GRAPHS=$w failed"; exit 1; }
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
rows = {}
for name in ("off", "on"):
    with open(f"{out}/graph_watch_{name}.json") as f:
        for r in json.load(f)["results"]:
            if "median_us" in r:
                rows.setdefault((r["role"] + " " + r["algo"], r["tokens"]), {})[name] = r["median_us"]
cost = []
for (algo, tokens), v in sorted(rows.items()):
    if "off" in v and "on" in v:
        cost.append({"algo": algo, "tokens": tokens, "off_us": v["off"], "on_us": v["on"],
                     "added_us": round(v["on"] - v["off"], 3)})
json.dump({"schema": "arfuse-graph-watch-cost/1", "proxy": True, "rows": cost}, open(f"{out}/graph_watch_cost.json", "w"),
          indent=1)
print("graph watch cost per call (median of the slowest rank, CUDA-graph replays; PROXY: 4 processes on one GPU)")
for c in cost:
    print(f"  {c['algo']:<28} {c['tokens']:>5} tokens  off {c['off_us']:9.2f} us  on {c['on_us']:9.2f} us  "
          f"added {c['added_us']:+8.2f} us")
PY
