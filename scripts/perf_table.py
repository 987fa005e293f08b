#!/usr/bin/env python3
"""Markdown tables from committed `arfuse bench -J` results (bench/results/*.json).

    python3 scripts/perf_table.py                 # print every table
    python3 scripts/perf_table.py --check FILE    # exit 1 if FILE lacks any current table

docs/perf.md embeds this output between `<!-- perf-tables:begin -->` and `<!-- perf-tables:end -->`;
a CPU test runs --check so the figures in the docs always come from the committed JSON.
"""
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def header(d, name):
    driver = d["driver"]
    if driver.count(".") < 2 and not driver.startswith("cuda-driver-api"):
        driver = "cuda-driver-api " + driver  # older files recorded the CUDA driver API version
    virt = "VIRTUAL ranks (not performance)" if d.get("virtual_ranks") else "real ranks"
    return (f"**{name}** — {d['gpu']}, driver {driver}, {d['arfuse']}, NCCL {d['nccl']}, "
            f"{d['ranks']} rank(s), {virt}, {d['dtype']}, hidden {d['hidden']}, {d['date']}  \n"
            f"`{d['command']}`\n")


def fmt(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def epilogues_of(d):
    """The epilogue variants of a run (files before arfuse-bench/3 have none: ["none"])."""
    e = d.get("epilogues")
    return e if isinstance(e, list) and e else ["none"]


def row_key(d, r):
    """Rows of a run with several epilogues are keyed by (epilogue, tokens), in the run's order."""
    eps = epilogues_of(d)
    if len(eps) == 1:
        return (0, "", r["tokens"])
    e = r.get("epilogue", "none")
    return (eps.index(e) if e in eps else len(eps), e, r["tokens"])


def key_cells(k):
    return f"{k[1]} | {k[2]}" if k[1] else f"{k[2]}"


def key_head(d):
    return ("| epilogue | tokens", "|---|---:") if len(epilogues_of(d)) > 1 else ("| tokens", "|---:")


def addrmsnorm_table(d, name):
    peak = d.get("copy_peak_GBps")
    rows = {}
    for r in d["results"]:
        rows.setdefault(row_key(d, r), {})[r["role"]] = r
    ref = {"sm-copy-kernel": "SM copy kernel", "graph-memcpy-node": "CUDA-graph memcpy node (copy engines)"}.get(
        d.get("copy_reference"), "copy")
    out = [header(d, name), f"Copy peak, {ref}, 1 GiB, read + write: {fmt(peak, 0)} GB/s\n",
           key_head(d)[0] + " | bytes moved | add+RMSNorm µs | GB/s | % of copy peak | copy of same bytes µs | "
           "% of same-bytes copy |",
           key_head(d)[1] + "|---:|---:|---:|---:|---:|---:|"]
    for t in sorted(rows):
        n, c = rows[t].get("addrmsnorm"), rows[t].get("copy")
        if not n or "median_us" not in n:
            continue
        pct = 100 * n["algbw_GBps"] / peak if peak else None
        same = 100 * c["median_us"] / n["median_us"] if c and "median_us" in c else None
        out.append(f"| {key_cells(t)} | {n['bytes']} | {fmt(n['median_us'])} | {fmt(n['algbw_GBps'], 0)} | {fmt(pct, 0)} | "
                   f"{fmt(c.get('median_us') if c else None)} | {fmt(same, 0)} |")
    return "\n".join(out) + "\n"


def fused_table(d, name):
    by = {}
    algos = []
    for r in d["results"]:
        a = r["algo"].split(":")[0] if r["algo"].startswith("auto") else r["algo"]
        if a not in algos:
            algos.append(a)
        by.setdefault(row_key(d, r), {})[a] = r
    out = [header(d, name),
           "Per call, µs (median of per-iteration slowest rank); in brackets: ratio to the baseline "
           "(nccl = NCCL all-reduce + arfuse's separate add+RMSNorm kernel).\n",
           key_head(d)[0] + " | bytes | " + " | ".join(algos) + " | #wrong |",
           key_head(d)[1] + "|---:|" + "---:|" * len(algos) + "---:|"]
    for t in sorted(by):
        cells, wrong = [], 0
        for a in algos:
            r = by[t].get(a)
            if not r or "median_us" not in r:
                cells.append("-")
                continue
            wrong += r.get("wrong", 0)
            label = r["algo"].split(":")[1] + " " if r["algo"].startswith("auto:") else ""
            ratio = f" ({r['ratio']:.2f})" if r.get("ratio") and r["role"] != "baseline" else ""
            cells.append(f"{label}{r['median_us']:.2f}{ratio}")
        first = next(r for r in by[t].values())
        out.append(f"| {key_cells(t)} | {first['bytes']} | " + " | ".join(cells) + f" | {wrong} |")
    return "\n".join(out) + "\n"


def verify_table(d, name):
    out = [header(d, name), f"{d.get('model', '')} verify pass: {d.get('layers')} layers x 2 fused calls in one CUDA graph.\n",
           "| tokens | arfuse path | arfuse ms/pass | baseline ms/pass | ratio |", "|---:|---|---:|---:|---:|"]
    rows = {}
    for r in d["results"]:
        rows.setdefault(r["tokens"], {})[r["role"]] = r
    for t in sorted(rows):
        a, b = rows[t].get("verify-pass"), rows[t].get("baseline-pass")
        if not a or "pass_ms" not in a:
            continue
        out.append(f"| {t} | {a['algo']} | {a['pass_ms']:.3f} | {fmt(b.get('pass_ms') if b else None, 3)} | "
                   f"{fmt(a.get('ratio'))} |")
    return "\n".join(out) + "\n"


def tables():
    parts = []
    for path in sorted(glob.glob(os.path.join(ROOT, "bench", "results", "*.json"))):
        with open(path) as f:
            d = json.load(f)
        if not str(d.get("schema", "")).startswith("arfuse-bench/"):
            continue  # other records kept beside the bench results (triage_*.json) have no perf table
        name = os.path.relpath(path, ROOT)
        if d.get("verify_pass"):
            parts.append(verify_table(d, name))
        elif d["op"] == "addrmsnorm":
            parts.append(addrmsnorm_table(d, name))
        else:
            parts.append(fused_table(d, name))
    return parts


def main():
    parts = tables()
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        text = open(sys.argv[2]).read()
        missing = [p.splitlines()[0] for p in parts if p not in text]
        if missing:
            print("stale perf tables in", sys.argv[2], "- regenerate with scripts/perf_table.py:")
            for m in missing:
                print("  ", m)
            return 1
        print(f"{len(parts)} perf tables current")
        return 0
    if len(sys.argv) != 1:
        print(__doc__)
        return 2
    print("\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
