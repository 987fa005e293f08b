#!/usr/bin/env python3
"""Summarise the `arfuse-phase` lines an ARFUSE_PHASE_TIMING build prints (src/device/phase_clock.cuh).

    arfuse bench ... 2>&1 | python3 scripts/phase_report.py [--label L] [-J out.json]

For each (path, nranks): the median over the printed calls and ranks of each point's time since the
kernel's first point, in microseconds, using the SM clock rate measured from the same lines (cycles
over %globaltimer ns). The increments between points are the phases the kernel names in its comments.
"""
import argparse
import json
import re
import statistics
import sys

LINE = re.compile(r"arfuse-phase path=(\w+) nranks=(\d+) rank=(\d+) call=(\d+) ns=(\d+) cycles=([-\d,]+)")
NAMES = {
    # enterCall runs before pdlWait (src/device/protocol.cuh), so the second point is the wait for the
    # previous kernel, which includes what the entry's atomic did not hide.
    "lowlatency": ["enterCall", "pdlWait", "send + settleEntry", "receive tile 0", "finish tiles", "exitCall"],
    "oneshot": ["enterCall", "pdlWait", "copy-in", "settleEntry + barrier", "sum + finish", "exitCall"],
    "twoshot": ["enterCall", "pdlWait", "copy-in + settleEntry + barrier 0", "reduce slice + barrier 1", "gather + finish",
                "exitCall"],
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="")
    ap.add_argument("-J", "--json", help="write the summary as JSON here")
    args = ap.parse_args()
    groups = {}
    for line in sys.stdin:
        m = LINE.search(line)
        if not m:
            continue
        path, nranks, ns = m.group(1), int(m.group(2)), int(m.group(5))
        cycles = [int(c) for c in m.group(6).split(",")]
        groups.setdefault((path, nranks), []).append((ns, cycles))
    out = []
    for (path, nranks), rows in sorted(groups.items()):
        names = NAMES.get(path, [f"p{k}" for k in range(1, 7)])
        npts = len(names)
        rate = statistics.median(r[1][npts - 1] / r[0] for r in rows if r[0] > 0)  # cycles per ns
        cum = [statistics.median(r[1][k] for r in rows) / rate / 1000.0 for k in range(npts)]
        steps = [cum[0]] + [cum[k] - cum[k - 1] for k in range(1, npts)]
        rec = {"label": args.label, "path": path, "nranks": nranks, "samples": len(rows), "sm_ghz": round(rate, 3),
               "kernel_us": round(cum[-1], 3), "phases_us": {n: round(s, 3) for n, s in zip(names, steps)}}
        out.append(rec)
        print(f"{args.label} {path} nranks={nranks} samples={len(rows)} sm={rate:.2f} GHz kernel {cum[-1]:.2f} us: " +
              ", ".join(f"{n} {s:.2f}" for n, s in zip(names, steps)))
    if not out:
        print(f"{args.label} no arfuse-phase lines (was the build configured with -DARFUSE_PHASE_TIMING=ON?)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schema": "arfuse-phase/1", "proxy": True, "records": out}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
