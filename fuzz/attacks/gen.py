#!/usr/bin/env python3
"""Hostile inputs of issue 37, generated (not committed: some are gigabytes once decompressed).

    gen.py json-collide N OUT     a JSON object whose N keys all have the same std::hash<std::string>
                                  (libstdc++'s _Hash_bytes, 64-bit): 24-byte keys whose last 8 bytes are
                                  solved so that every key hashes to one value (its block mix and final
                                  mix are invertible)
    gen.py cr MB OUT              MB megabytes of '\\r' and nothing else (a progress bar gone wrong)
    gen.py cr-gz MB OUT           the same, gzip-compressed (about 1 KB per MB)
    gen.py calib-overflow OUT     a calibration whose one-shot crossover times (nranks - 1) overflows
                                  a signed 64-bit integer

fuzz/attacks/measure.sh runs each through arfuse under /usr/bin/time -v and ulimit -v 2097152.
"""
import gzip
import json
import sys

M = (0xC6A4A793 << 32) + 0x5BD1E995
MASK = (1 << 64) - 1
MINV = pow(M, -1, 1 << 64)
SEED = 0xC70F6907


def shift_mix(v):
    return v ^ (v >> 47)  # its own inverse: 2 x 47 > 64


def block(k):
    return (shift_mix((k * M) & MASK) * M) & MASK


def unblock(d):
    return (shift_mix((d * MINV) & MASK) * MINV) & MASK


def stdhash(b):
    n = len(b)
    h = (SEED ^ (n * M)) & MASK
    for i in range(0, n & ~7, 8):
        h = ((h ^ block(int.from_bytes(b[i:i + 8], "little"))) * M) & MASK
    if n & 7:
        h = ((h ^ int.from_bytes(b[n & ~7:], "little")) * M) & MASK
    return shift_mix((shift_mix(h) * M) & MASK)


def colliding_key(i, target):
    head = b"%08x%08x" % (i >> 32, i & 0xFFFFFFFF)  # two printable blocks, distinct per key
    h = (SEED ^ (24 * M)) & MASK
    for j in (0, 8):
        h = ((h ^ block(int.from_bytes(head[j:j + 8], "little"))) * M) & MASK
    before_final = shift_mix((shift_mix(target) * MINV) & MASK)  # undo the final mix
    last = unblock(((before_final * MINV) & MASK) ^ h)
    key = head + last.to_bytes(8, "little")
    assert stdhash(key) == target
    return key


def json_key(b):
    # Bytes below 0x20 and the two JSON specials are escaped; every other byte goes in raw (the reader
    # keeps raw bytes as they are).
    out = bytearray(b'"')
    for c in b:
        if c in (0x22, 0x5C):
            out += b"\\" + bytes([c])
        elif c < 0x20:
            out += b"\\u%04x" % c
        else:
            out.append(c)
    return bytes(out + b'"')


def main():
    what = sys.argv[1]
    if what == "json-collide":
        n, out = int(sys.argv[2]), sys.argv[3]
        with open(out, "wb") as f:
            f.write(b"{")
            for i in range(n):
                f.write((b"," if i else b"") + json_key(colliding_key(i + 1, 0x0123456789ABCDEF)) + b":0")
            f.write(b"}\n")
    elif what in ("cr", "cr-gz"):
        mb, out = int(sys.argv[2]), sys.argv[3]
        chunk = b"\r" * (1 << 20)
        with (gzip.open(out, "wb", 9) if what == "cr-gz" else open(out, "wb")) as f:
            for _ in range(mb):
                f.write(chunk)
    elif what == "calib-overflow":
        out = sys.argv[2]
        big = (1 << 62) + 1
        doc = {
            "schema": "arfuse-calibration/1", "created": "2026-12-03T00:00:00Z", "arfuse": "x", "hostname": "h",
            "gpus": ["GPU-0"], "fingerprint": "f", "hidden": 7168, "dtype": "bf16",
            "groups": [{"nranks": 4, "virtual_ranks": True, "best_up_to_bytes": {"oneshot": big, "nccl": big + 1},
                        "notes": [], "points": [
                            {"algo": "oneshot", "tokens": 1, "bytes": big, "us": 1.0},
                            {"algo": "nccl", "tokens": 1, "bytes": big, "us": 2.0},
                            {"algo": "oneshot", "tokens": 2, "bytes": big + 1, "us": 3.0},
                            {"algo": "nccl", "tokens": 2, "bytes": big + 1, "us": 2.0}]}]}
        with open(out, "w") as f:
            json.dump(doc, f, indent=1)
    else:
        sys.exit("unknown generator " + what)


if __name__ == "__main__":
    main()
