#!/usr/bin/env python3
"""Every kernel of the library compiles without register spills, on every architecture it is built for.

Reads the ptxas resource reports the build keeps beside each CUDA object of libarfuse
(scripts/ptxas_report.sh, -Xptxas=-v; src/CMakeLists.txt) and fails when any function of any
architecture has spill stores or spill loads, naming each (demangled when c++filt is there) with its
registers and stack frame. Every kernel a plan can pick is an instantiation in one of these objects
(algos/*/launch.cu), so this covers every variant, the extended epilogue's included.

usage: check_spills.py OBJECT_DIR EXPECTED_REPORTS ARCHS [--table]
  OBJECT_DIR        the arfuse target's object directory (searched recursively for *.ptxas)
  EXPECTED_REPORTS  how many CUDA sources the target compiles (each leaves one report)
  ARCHS             the build's architecture list ("90" or "80;86;89;90;100f;120f")
  --table           also print every kernel's registers and stack frame
"""
import os
import re
import shutil
import subprocess
import sys

ENTRY = re.compile(r"^ptxas info\s*: Compiling entry function '([^']+)' for '(sm_[0-9a-z]+)'")
PROPS = re.compile(r"^ptxas info\s*: Function properties for (\S+)")
FRAME = re.compile(r"^\s+(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"^ptxas info\s*: Used (\d+) registers")


def parse(path):
    """{(arch, function): {"regs", "stack", "stores", "loads", "entry"}} of one report."""
    out = {}
    arch = None
    entry = None
    props = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = ENTRY.match(line)
            if m:
                entry, arch = m.group(1), m.group(2)
                out.setdefault((arch, entry), {"regs": None, "stack": 0, "stores": 0, "loads": 0, "entry": True})
                props = None
                continue
            m = PROPS.match(line)
            if m:
                props = m.group(1)
                continue
            m = FRAME.match(line)
            if m and props and arch:
                rec = out.setdefault((arch, props), {"regs": None, "stack": 0, "stores": 0, "loads": 0, "entry": False})
                rec["stack"], rec["stores"], rec["loads"] = (int(g) for g in m.groups())
                props = None
                continue
            m = USED.match(line)
            if m and entry and arch and (arch, entry) in out and out[(arch, entry)]["regs"] is None:
                out[(arch, entry)]["regs"] = int(m.group(1))
    return out


def demangle(names):
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    res = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=False)
    lines = res.stdout.splitlines()
    return {n: (lines[i] if i < len(lines) else n) for i, n in enumerate(names)}


def main(argv):
    if len(argv) < 4:
        print(__doc__)
        return 2
    objdir, expected, archs = argv[1], int(argv[2]), argv[3]
    table = "--table" in argv[4:]
    reports = []
    for root, _, files in os.walk(objdir):
        reports += [os.path.join(root, f) for f in files if f.endswith(".ptxas")]
    reports.sort()
    if len(reports) < expected:
        print(f"FAIL: {len(reports)} ptxas reports under {objdir}, expected {expected} (one per CUDA source of "
              "libarfuse): rebuild the arfuse target (its objects predate scripts/ptxas_report.sh, or a compile "
              "failed)")
        return 1
    funcs = {}
    for r in reports:
        for key, rec in parse(r).items():
            funcs[key] = dict(rec, report=os.path.relpath(r, objdir))
    want = []
    for a in archs.replace(",", ";").split(";"):
        a = re.sub(r"-(real|virtual)$", "", a.strip())
        if a:
            want.append("sm_" + a)
    fail = False
    names = demangle(sorted({f for _, f in funcs}))
    for sm in want:
        mine = {f: rec for (a, f), rec in funcs.items() if a == sm}
        kernels = [f for f, rec in mine.items() if rec["entry"]]
        if not kernels:
            print(f"FAIL: no kernel compiled for {sm} in the reports (is {sm} in the build's architectures?)")
            fail = True
            continue
        bad = sorted((f for f, rec in mine.items() if rec["stores"] or rec["loads"]), key=lambda f: names[f])
        stacked = [f for f, rec in mine.items() if rec["stack"] and not (rec["stores"] or rec["loads"])]
        regs = [rec["regs"] for rec in mine.values() if rec["regs"] is not None]
        print(f"{sm}: {len(kernels)} kernels, {len(mine)} functions, {len(bad)} with spills, "
              f"{len(stacked)} with a stack frame but no spill, registers {min(regs)}-{max(regs)}")
        for f in bad:
            rec = mine[f]
            print(f"  SPILL {sm} {names[f]}: {rec['stores']} B stores, {rec['loads']} B loads, "
                  f"{rec['stack']} B stack, {rec['regs']} registers ({rec['report']})")
        if table:
            for f in sorted(kernels, key=lambda f: names[f]):
                rec = mine[f]
                print(f"  {sm} {rec['regs']:>3} regs {rec['stack']:>4} B stack  {names[f]}")
        fail = fail or bool(bad)
    if fail:
        print("FAIL: register spills (above); every kernel variant a plan can pick must compile without them")
        return 1
    print("ok: no kernel spills registers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
