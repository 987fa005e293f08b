#!/usr/bin/env python3
"""Markdown tables from committed `arfuse bench -J` results (bench/results/*.json).

    python3 scripts/perf_table.py                 # print every table
    python3 scripts/perf_table.py --check FILE    # exit 1 if FILE lacks any current table
    python3 scripts/perf_table.py --results DIR   # the tables of another folder's JSON

docs/perf.md embeds this output between `<!-- perf-tables:begin -->` and `<!-- perf-tables:end -->`;
a CPU test runs --check so the figures in the docs always come from the committed JSON.

Each file gets its own table. Files that name their machine (arfuse-bench/4 "machine", from
`arfuse bench --machine` or `bench/peers.py --machine`) are also merged, per machine and shape, into
one table of every path and peer side by side with a "vs best peer" column: the best arfuse time over
the best peer's (peers: bench/peers.py's peer rows and bench's NCCL baselines). Proxy figures
(virtual ranks, or processes sharing one GPU) are labelled PROXY and never merged with real ones.
"""
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def is_proxy(d):
    return bool(d.get("proxy") or d.get("virtual_ranks"))


def header(d, name):
    driver = d["driver"]
    if driver and driver.count(".") < 2 and not driver.startswith("cuda-driver-api"):
        driver = "cuda-driver-api " + driver  # older files recorded the CUDA driver API version
    if d.get("virtual_ranks"):
        virt = "VIRTUAL ranks, PROXY figures (the kernels' own cost, not performance)"
    elif d.get("proxy"):
        virt = "PROXY figures (" + d.get("proxy_reason", "processes share one GPU") + ")"
    else:
        virt = "real ranks" + (", one process per rank" if d.get("mode") == "procs" else "")
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
    base = ("the best baseline at that size (nccl = NCCL all-reduce + arfuse's separate add+RMSNorm kernel, "
            "nccl-symm = the same on NCCL's symmetric kernels)" if d.get("schema", "") >= "arfuse-bench/4" else
            "the baseline (nccl = NCCL all-reduce + arfuse's separate add+RMSNorm kernel)")
    out = [header(d, name),
           f"Per call, {'PROXY ' if is_proxy(d) else ''}µs (median of per-iteration slowest rank); in brackets: "
           f"ratio to {base}.\n",
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


def peers_table(d, name):
    """A bench/peers.py file on its own: every peer per size, arfuse's ratio to the best peer."""
    by, names = {}, []
    for r in d["results"]:
        if r["algo"] not in names:
            names.append(r["algo"])
        by.setdefault(r["tokens"], {})[r["algo"]] = r
    out = [header(d, name), f"bench/peers.py, {d.get('op')}, per call µs; arfuse's ratio to the best peer in brackets; "
           f"timing: {d.get('timing') or 'CUDA-graph replays'}.\n",
           "| tokens | " + " | ".join(names) + " | #wrong |", "|---:|" + "---:|" * len(names) + "---:|"]
    for t in sorted(by):
        cells = [cell(by[t].get(n), ratio=by[t].get(n, {}).get("role") == "arfuse") for n in names]
        out.append(f"| {t} | " + " | ".join(cells) + f" | {sum(r.get('wrong', 0) for r in by[t].values())} |")
    notes = sorted({f"{r['algo']}: {r['error']}" for r in d["results"] if r.get("error", "").startswith("cannot run")})
    out += [""] + [f"- {n}" for n in notes] if notes else []
    return "\n".join(out) + "\n"


def cell(r, ratio=False):
    if not r or "median_us" not in r:
        return "n/a" if r and r.get("error", "").startswith("n/a") else "-"
    tag = f" ({r['ratio']:.2f})" if ratio and r.get("ratio") else ""
    return f"{r['median_us']:.2f}{tag}"


ARFUSE_ROLES, PEER_ROLES = ("arfuse", "addrmsnorm"), ("peer", "baseline")


def series_name(d, r):
    """A column of a merged table: peers by their name, bench's rows by path (auto:x -> auto)."""
    a = r["algo"].split(":")[0]
    if d.get("suite") == "peers":
        return "peers:" + a if r["role"] == "arfuse" else a
    return {"local": "arfuse", "memcpy": "copy"}.get(a, a)


def machine_tables(docs):
    """One table per (machine, op, dtype, hidden, ranks, proxy) of every file that names its machine."""
    groups = {}
    for name, d in docs:
        if d.get("machine") and not d.get("verify_pass"):
            key = (d["machine"], d["op"], d["dtype"], d["hidden"], d["ranks"], is_proxy(d))
            groups.setdefault(key, []).append((name, d))
    parts = []
    for (machine, op, dtype, hidden, ranks, proxy), files in sorted(groups.items()):
        cols, by = [], {}
        for _, d in files:
            for r in d["results"]:
                if r.get("epilogue", "none") != "none" or r["role"] == "copy" and d.get("suite") != "peers":
                    continue
                c = series_name(d, r)
                if c not in cols:
                    cols.append(c)
                by.setdefault(r["tokens"], {})[c] = r
        head = (f"**{machine}: {op}, {ranks} rank(s), {dtype}, hidden {hidden}"
                f"{', PROXY figures (not performance)' if proxy else ''}** — every path and peer, per call µs\n\n"
                + "".join(f"- `{n}`: {d['gpu']}, {d['date']}, `{d['command']}`\n" for n, d in files))
        out = [head, "| tokens | " + " | ".join(cols) + " | best arfuse | best peer | vs best peer |",
               "|---:|" + "---:|" * len(cols) + "---|---|---:|"]
        for t in sorted(by):
            ok = {c: r for c, r in by[t].items() if "median_us" in r and not r.get("wrong") and not r.get("error")}
            mine = [(r["median_us"], c) for c, r in ok.items() if r["role"] in ARFUSE_ROLES]
            peer = [(r["median_us"], c) for c, r in ok.items() if r["role"] in PEER_ROLES]
            bm, bp = min(mine) if mine else None, min(peer) if peer else None
            ratio = f"{bm[0] / bp[0]:.2f}" if bm and bp else "-"
            out.append(f"| {t} | " + " | ".join(cell(by[t].get(c)) for c in cols) +
                       f" | {bm[1] if bm else '-'} | {bp[1] if bp else '-'} | {ratio} |")
        parts.append("\n".join(out) + "\n")
    return parts


def tables(results=None):
    parts, docs = [], []
    results = results or os.path.join(ROOT, "bench", "results")
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        with open(path) as f:
            d = json.load(f)
        if not str(d.get("schema", "")).startswith("arfuse-bench/"):
            continue  # other records kept beside the bench results (triage_*.json) have no perf table
        name = os.path.relpath(path, ROOT) if path.startswith(ROOT) else os.path.basename(path)
        docs.append((name, d))
        if d.get("suite") == "peers":
            parts.append(peers_table(d, name))
        elif d.get("verify_pass"):
            parts.append(verify_table(d, name))
        elif d["op"] == "addrmsnorm":
            parts.append(addrmsnorm_table(d, name))
        else:
            parts.append(fused_table(d, name))
    return parts + machine_tables(docs)


def main():
    args = sys.argv[1:]
    results = None
    if len(args) >= 2 and args[0] == "--results":
        results, args = args[1], args[2:]
    parts = tables(results)
    sys.argv = [sys.argv[0]] + args
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
