#!/usr/bin/env python3
"""Per-kernel SASS hashes of a library, to show a host-side change left the device code alone.

    scripts/sass_hashes.py build/src/libarfuse.so > after.txt     # (and before.txt from the old build)
    diff <(cut -d' ' -f1,3 before.txt | sort) <(cut -d' ' -f1,3 after.txt | sort)

Prints one line per kernel and architecture: "<arch> <mangled name> <sha1 of its SASS> <copies>".
The SASS is cuobjdump --dump-sass's (nvdisasm must be on PATH; both are in the CUDA toolkit, or
`pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`), whitespace collapsed (cuobjdump pads
columns to the longest name in the file). A kernel in an anonymous namespace carries its file's name
in its mangled name, so compare the hashes (columns 1 and 3) when files moved, the names otherwise.
"""
import collections
import hashlib
import re
import shutil
import subprocess
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    cuobjdump = shutil.which("cuobjdump")
    if not cuobjdump:
        sys.exit("sass_hashes.py: cuobjdump not found on PATH (with nvdisasm beside it)")
    out = subprocess.run([cuobjdump, "--dump-sass", sys.argv[1]], capture_output=True, text=True, check=True).stdout
    arch, name, body, seen = None, None, [], collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*arch = (sm_\d+)", line)
        if m and name is None:
            arch = m.group(1)
            continue
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name, body = m.group(1), []
            continue
        if name is None:
            continue
        if re.match(r"\s*\.{10}\s*$", line):  # the end of a function
            seen[(arch, name, hashlib.sha1("\n".join(body).encode()).hexdigest())] += 1
            name = None
            continue
        body.append(" ".join(line.split()))
    for (a, n, h), copies in sorted(seen.items()):
        print(a, n, h, copies)


if __name__ == "__main__":
    main()
