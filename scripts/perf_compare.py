#!/usr/bin/env python3
"""Issue 33's before/after table from one `gpu_check.sh --perf33` call (PROXY: virtual ranks, one GPU).

Reads, from DIR (the call's $OUT):
  baseline_tp{N}.json, new_tp{N}.json         `arfuse bench --op fused` of the baseline tree and this one
  knob_{NAME}_tp{N}.json                      this tree under one experimental knob (gpu_check.sh KNOBS)
  verify_{baseline,new}_tp{N}.json            `arfuse bench --verify-pass --model kimi-k2`
  verify_knob_{NAME}_tp{N}_r{K}.json          the same, this tree under a knob, run K of alternated runs
  floor_virtual.json                          arfuse_proxy_floor's run of the same call (else --floor FILE,
                                              else the committed bench/results/h200_proxy_floor.json); its
                                              copy_hbm / copy_l2 rows are the copy rates of the call's GPU
                                              (else the H200's committed ones below, and the table says so)
and prints, per rank count and token count: auto before and after (its path), the fastest forced path
after, the floor of auto's path and auto over it: at 256 / 2048 tokens the HBM floor of virtual ranks
(docs/perf.md "Floors"); below, the measured barrier trips at the row's CTA count plus the path's
bytes at the L2 copy rate (docs/perf.md change 32),
then each knob's auto row against this tree's auto, then the verify pass before and after. A row whose
check against fp64 failed is marked WRONG; one that did not run says why in the JSON (`error`).

usage: perf_compare.py DIR [--json OUT.json] [--floor FLOOR.json]
       perf_compare.py --self-test
"""
import glob
import json
import os
import re
import sys
import tempfile

# The H200's copy rates, for a floor file without copy rows (arfuse_proxy_floor before its `copy` mode):
# combined read + write bandwidth of an SM copy with inputs rotated beyond L2, h200_addrmsnorm_rotated_v3.json,
# 4096 tokens x 7168 bf16, 234.9 MB moved in 62.20 us (docs/perf.md "Floors");
COPY_GBPS = 3776.65
# and an SM copy of 14.7 MB from L2: 3.16 us (h200_addrmsnorm_v2.json, 256 tokens).
L2_GBPS = 4650.0
HIDDEN_BYTES = 7168 * 2


def rates(floor):
    """(HBM GB/s, L2 GB/s, where they come from): the floor file's copy rows, measured on the GPU of its
    call (arfuse_proxy_floor --modes copy), else the H200's committed figures above."""
    got = {r["mode"]: r.get("gbps") for r in (floor or {}).get("rows", [])
           if r.get("mode") in ("copy_hbm", "copy_l2") and r.get("gbps")}
    if "copy_hbm" in got and "copy_l2" in got:
        return got["copy_hbm"], got["copy_l2"], f"measured on {floor.get('gpu', 'this GPU')} in the same run"
    return COPY_GBPS, L2_GBPS, "the H200's committed copy rates (the floor file has no copy rows)"


def floor_us(path, tokens, n, copy_gbps=COPY_GBPS):
    """Bytes every rank must read and write for `path`, all ranks on one GPU, over the copy bandwidth."""
    b = tokens * HIDDEN_BYTES
    per_rank = {"oneshot": (n + 4) * b, "twoshot": 6 * b}.get(path)
    return None if per_rank is None else n * per_rank / (copy_gbps * 1e3)

COMMITTED_FLOOR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "bench", "results", "h200_proxy_floor.json")


def barrier_us(floor, n, ctas):
    """The measured one-trip barrier of n ranks at the smallest measured CTA count >= ctas (else the largest)."""
    got = sorted((r["ctas"], r["median_us"]) for r in floor.get("rows", [])
                 if r.get("mode") == "barrier" and r.get("ranks") == n)
    if not got:
        return None
    return next((t for c, t in got if c >= ctas), got[-1][1])


def trip_floor_us(floor, path, tokens, n, ctas):
    """Below 256 tokens: the path's barrier trips (measured: arfuse_proxy_floor) plus its bytes from L2."""
    if not floor:
        return None
    l2 = rates(floor)[1]
    b, one = barrier_us(floor, n, ctas), barrier_us(floor, 1, ctas)
    if b is None:
        return None
    data = tokens * HIDDEN_BYTES
    if path == "lowlatency":
        return b
    if path == "oneshot":
        return b + n * (n + 4) * data / (l2 * 1e3)
    if path == "twoshot" and one is not None:
        return 2 * b - one + n * 6 * data / (l2 * 1e3)
    return None


def path_floor_us(floor, row, tokens, n):
    """The floor of the path auto took (row), or None where none is defined (host-staged, NCCL)."""
    if not row:
        return None
    if tokens >= 256:
        return floor_us(path_of(row), tokens, n, rates(floor)[0])
    return trip_floor_us(floor, path_of(row), tokens, n, row.get("plan", {}).get("blocks", 1))


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def rows(doc):
    return doc.get("results", []) if doc else []


def auto_row(doc, tokens):
    for r in rows(doc):
        if r["tokens"] == tokens and r["algo"].startswith("auto") and "median_us" in r:
            return r
    return None


def best_forced(doc, tokens):
    cands = [r for r in rows(doc) if r["tokens"] == tokens and not r["algo"].startswith("auto") and "median_us" in r
             and r.get("role") == "arfuse" and not r.get("wrong")]
    return min(cands, key=lambda r: r["median_us"]) if cands else None


def path_of(r):
    return r["algo"].split(":", 1)[-1] if r else "-"


def us(r):
    if not r:
        return "-"
    return f"{r['median_us']:.2f}" + (" WRONG" if r.get("wrong") else "")


def wrong_rows(docs):
    return sum(1 for d in docs for r in rows(d) if r.get("wrong"))


def table(d, floor_file=None):
    lines = []
    floor = load(os.path.join(d, "floor_virtual.json")) or load(floor_file or COMMITTED_FLOOR)
    ranks = sorted({int(m.group(1)) for f in glob.glob(os.path.join(d, "*_tp*.json"))
                    for m in [re.search(r"_tp(\d+)\.json$", f)] if m})
    knobs = sorted({m.group(1) for f in glob.glob(os.path.join(d, "knob_*_tp*.json"))
                    for m in [re.search(r"knob_(.+)_tp\d+\.json$", os.path.basename(f))] if m})
    summary = {"fused": [], "knobs": [], "verify": []}
    lines.append("# issue 33, PROXY (virtual ranks on one GPU), hidden 7168 bf16, us per call (median of the slowest rank)")
    lines.append(f"{'ranks':>5} {'tok':>5} | {'base auto':>18} | {'new auto':>18} | {'new/base':>8} | "
                 f"{'best forced new':>20} | {'floor':>7} {'auto/fl':>7}")
    docs = []
    for n in ranks:
        base, new = load(os.path.join(d, f"baseline_tp{n}.json")), load(os.path.join(d, f"new_tp{n}.json"))
        docs += [base, new]
        toks = sorted({r["tokens"] for r in rows(new) + rows(base)})
        for t in toks:
            b, a, f = auto_row(base, t), auto_row(new, t), best_forced(new, t)
            ratio = f"{a['median_us'] / b['median_us']:.3f}" if a and b else "-"
            fl = path_floor_us(floor, a, t, n)
            fl_text = f"{fl:.2f}" if fl and t < 256 else f"{fl:.1f}" if fl else "-"
            over = f"{a['median_us'] / fl:.2f}" if fl else "-"
            lines.append(f"{n:>5} {t:>5} | {us(b):>9} {path_of(b):>8} | {us(a):>9} {path_of(a):>8} | {ratio:>8} | "
                         f"{us(f):>9} {path_of(f):>10} | {fl_text:>7} {over:>7}")
            summary["fused"].append({"ranks": n, "tokens": t, "base_auto_us": b and b["median_us"],
                                     "new_auto_us": a and a["median_us"], "new_path": path_of(a),
                                     "best_forced_us": f and f["median_us"], "best_forced_path": path_of(f),
                                     "floor_us": fl})
    if knobs:
        lines.append("")
        lines.append("# knobs (this tree, one experimental variable each): auto us, and the change against this tree's auto")
        lines.append(f"{'ranks':>5} {'tok':>5} | {'new auto':>8} | " + " | ".join(f"{k:>16}" for k in knobs))
        for n in ranks:
            new = load(os.path.join(d, f"new_tp{n}.json"))
            kd = {k: load(os.path.join(d, f"knob_{k}_tp{n}.json")) for k in knobs}
            docs += list(kd.values())
            toks = sorted({r["tokens"] for k in knobs for r in rows(kd[k])})
            for t in toks:
                a = auto_row(new, t)
                cells = []
                for k in knobs:
                    r = auto_row(kd[k], t)
                    if not r:
                        cells.append(f"{'-':>16}")
                        continue
                    delta = f"{r['median_us'] - a['median_us']:+.2f}" if a else ""
                    cells.append(f"{us(r):>8} {delta:>7}")
                    summary["knobs"].append({"knob": k, "ranks": n, "tokens": t, "auto_us": r["median_us"],
                                             "path": path_of(r), "new_auto_us": a and a["median_us"]})
                lines.append(f"{n:>5} {t:>5} | {us(a):>8} | " + " | ".join(cells))
    vb = sorted(glob.glob(os.path.join(d, "verify_new_tp*.json")))
    if vb:
        lines.append("")
        lines.append("# bench --verify-pass --model kimi-k2 (122 fused calls per pass, PROXY), ms per pass")
        lines.append(f"{'ranks':>5} {'tok':>5} | {'baseline':>9} | {'new':>9} | {'new/base':>8} | path")
        for f in vb:
            n = int(re.search(r"_tp(\d+)\.json$", f).group(1))
            new, base = load(f), load(os.path.join(d, f"verify_baseline_tp{n}.json"))
            docs += [new, base]
            for r in rows(new):
                if "pass_ms" not in r:
                    continue
                b = next((x for x in rows(base) if x["tokens"] == r["tokens"] and "pass_ms" in x), None)
                ratio = f"{r['pass_ms'] / b['pass_ms']:.3f}" if b else "-"
                before = f"{b['pass_ms']:.3f}" if b else "-"
                lines.append(f"{n:>5} {r['tokens']:>5} | {before:>9} | {r['pass_ms']:>9.3f} | {ratio:>8} | {path_of(r)}")
                summary["verify"].append({"ranks": n, "tokens": r["tokens"], "new_ms": r["pass_ms"],
                                          "base_ms": b and b["pass_ms"]})
    vk = {}
    for f in glob.glob(os.path.join(d, "verify_knob_*_tp*_r*.json")):
        m = re.search(r"verify_knob_(.+)_tp(\d+)_r(\d+)\.json$", os.path.basename(f))
        doc = load(f)
        docs.append(doc)
        for r in rows(doc):
            if m and "pass_ms" in r:
                vk.setdefault((int(m.group(2)), r["tokens"]), {}).setdefault(m.group(1), []).append(r["pass_ms"])
    if vk:
        names = sorted({k for v in vk.values() for k in v}, key=lambda k: (k != "default", k))
        lines.append("")
        lines.append("# verify pass under knobs, alternated runs of this tree: median ms per pass (each run's ms)")
        lines.append(f"{'ranks':>5} {'tok':>5} | " + " | ".join(f"{k:>30}" for k in names))
        for (n, t) in sorted(vk):
            cells = []
            for k in names:
                v = sorted(vk[(n, t)].get(k, []))
                med = v[len(v) // 2] if v else None
                cells.append(f"{(f'{med:.3f} (' + ' '.join(f'{x:.3f}' for x in v) + ')') if v else '-':>30}")
                if v:
                    summary.setdefault("verify_knobs", []).append({"knob": k, "ranks": n, "tokens": t,
                                                                    "median_ms": med, "runs_ms": v})
            lines.append(f"{n:>5} {t:>5} | " + " | ".join(cells))
    w = wrong_rows([x for x in docs if x])
    lines.append("")
    hbm, l2, source = rates(floor)
    lines.append("floor: >= 256 tokens the HBM floor; below, " +
                 (f"the barrier trips of {floor.get('command', 'arfuse_proxy_floor')} ({floor.get('date', '?')})"
                  if floor else "none (no arfuse_proxy_floor JSON)") + " plus the bytes from L2")
    lines.append(f"copy rates: HBM {hbm:.0f} GB/s, L2 {l2:.0f} GB/s: {source}")
    summary["copy_rates"] = {"hbm_gbps": hbm, "l2_gbps": l2, "source": source}
    lines.append(f"rows checked against fp64 and wrong: {w}" + ("  <-- FAILURE" if w else ""))
    return "\n".join(lines), summary


def self_test():
    """Two fake runs: the table names the faster path, the ratio and the floor."""
    with tempfile.TemporaryDirectory() as d:
        def doc(rs):
            return {"results": [dict(role="arfuse", wrong=0, **r) for r in rs]}
        base = doc([{"tokens": 16, "algo": "auto:oneshot", "median_us": 10.0},
                    {"tokens": 256, "algo": "auto:twoshot", "median_us": 100.0}])
        new = doc([{"tokens": 1, "algo": "auto:lowlatency", "median_us": 6.0, "plan": {"blocks": 4}},
                   {"tokens": 16, "algo": "auto:oneshot", "median_us": 8.0, "plan": {"blocks": 32}},
                   {"tokens": 16, "algo": "twoshot", "median_us": 9.0},
                   {"tokens": 256, "algo": "auto:twoshot", "median_us": 70.0}])
        knob = doc([{"tokens": 16, "algo": "auto:oneshot", "median_us": 7.5}])
        vdef = doc([{"tokens": 16, "algo": "auto:oneshot", "pass_ms": 1.5}])
        vpush = doc([{"tokens": 16, "algo": "auto:oneshot", "pass_ms": 1.4}])
        floor = {"command": "arfuse_proxy_floor (made up)", "date": "2026-12-03",
                 "rows": [{"mode": "barrier", "ranks": n, "ctas": c, "median_us": t}
                          for n, c, t in ((1, 4, 1.0), (1, 32, 1.0), (8, 4, 3.0), (8, 16, 3.5), (8, 64, 4.5))]}
        for name, content in (("floor_virtual.json", floor), ("baseline_tp8.json", base), ("new_tp8.json", new), ("knob_late_tp8.json", knob),
                              ("verify_knob_default_tp8_r1.json", vdef), ("verify_knob_nopush_tp8_r1.json", vpush)):
            with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                json.dump(content, f)
        text, summary = table(d)
        fl = floor_us("twoshot", 256, 8)
        # 1 token on 4 CTAs: the 8-rank barrier at 4 CTAs; 16 tokens on 32 CTAs: the next measured (64) + bytes
        f1 = summary["fused"][0]["floor_us"]
        f16 = summary["fused"][1]["floor_us"]
        want16 = 4.5 + 8 * 12 * 16 * HIDDEN_BYTES / (L2_GBPS * 1e3)
        ok = ("0.800" in text and "7.50   -0.50" in text and f"{fl:.1f}" in text and
              abs(summary["fused"][2]["floor_us"] - 8 * 6 * 256 * HIDDEN_BYTES / (COPY_GBPS * 1e3)) < 1e-9 and
              f1 == 3.0 and abs(f16 - want16) < 1e-9 and f"{want16:.2f}" in text and "(made up)" in text and
              "wrong: 0" in text and "1.500 (1.500)" in text and "1.400 (1.400)" in text)
        ok = ok and "the H200's committed copy rates" in text
        # A floor file with copy rows: its rates set the floors (half the H200's HBM rate doubles the 256 one).
        floor["gpu"] = "made-up GPU"
        floor["rows"] += [{"mode": "copy_hbm", "ranks": 1, "ctas": 1, "median_us": 1.0, "gbps": COPY_GBPS / 2},
                          {"mode": "copy_l2", "ranks": 1, "ctas": 1, "median_us": 1.0, "gbps": L2_GBPS / 2}]
        with open(os.path.join(d, "floor_virtual.json"), "w", encoding="utf-8") as f:
            json.dump(floor, f)
        text2, summary2 = table(d)
        ok = ok and abs(summary2["fused"][2]["floor_us"] - 2 * fl) < 1e-9 and \
            abs(summary2["fused"][1]["floor_us"] - (4.5 + 2 * (want16 - 4.5))) < 1e-9 and \
            "measured on made-up GPU" in text2 and "barrier" not in [r["mode"] for r in floor["rows"][-2:]]
        print(text)
        print(text2.splitlines()[-2])
        print("self-test:", "ok" if ok else "FAILED")
        return 0 if ok else 1


def main(argv):
    if len(argv) >= 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) < 2:
        print(__doc__)
        return 2
    floor_file = argv[argv.index("--floor") + 1] if "--floor" in argv else None
    text, summary = table(argv[1], floor_file)
    print(text)
    if "--json" in argv:
        with open(argv[argv.index("--json") + 1], "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
    return 1 if "<-- FAILURE" in text else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
