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
# Each path's points in the order they are stamped: (index, the phase that ends there). Points 7-11 are
# the finish's sub-points (src/device/phase_clock.cuh kSub*); 0 in a line means not stamped by that call.
FINISH = [(8, "finish: q + row push"), (9, "finish: row wait"), (10, "finish: row total"), (11, "finish: norm + stores")]
ORDERS = {
    # enterCall runs before pdlWait (src/device/protocol.cuh), so the second point is the wait for the
    # previous kernel, which includes what the entry's atomic did not hide.
    "lowlatency": [(1, "enterCall"), (2, "pdlWait"), (3, "send + settleEntry"), (4, "receive tile 0")] + FINISH +
                  [(5, "finish: release + other tiles"), (6, "exitCall")],
    "oneshot": [(1, "enterCall"), (2, "pdlWait"), (3, "copy-in"), (4, "settleEntry + barrier"), (7, "sum")] + FINISH +
               [(5, "finish: release + other tiles"), (6, "exitCall")],
    "twoshot": [(1, "enterCall"), (2, "pdlWait"), (3, "copy-in + settleEntry + barrier 0"),
                (4, "reduce slice + barrier 1"), (7, "gather")] + FINISH +
               [(5, "finish: release + other tiles"), (6, "exitCall")],
}
EXIT = 6  # the last point of every path


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
        order = ORDERS.get(path, [(k, f"p{k}") for k in range(1, EXIT + 1)])
        # A sub-point no sampled call stamped (0), or a line of an older build without it, is left out.
        order = [(k, n) for k, n in order if all(k - 1 < len(r[1]) for r in rows) and
                 statistics.median(r[1][k - 1] for r in rows) > 0]
        if not any(8 <= k <= 11 for k, _ in order):  # no sub-points: point 5 ends the whole finish
            summed = any(k == 7 for k, _ in order)
            order = [(k, ("finish tiles" if summed or path == "lowlatency" else "sum + finish") if k == 5 else n)
                     for k, n in order]
        rate = statistics.median(r[1][EXIT - 1] / r[0] for r in rows if r[0] > 0)  # cycles per ns
        cum = [statistics.median(r[1][k - 1] for r in rows) / rate / 1000.0 for k, _ in order]
        names = [n for _, n in order]
        steps = [cum[0]] + [cum[i] - cum[i - 1] for i in range(1, len(cum))]
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
