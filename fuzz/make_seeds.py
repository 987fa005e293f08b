#!/usr/bin/env python3
"""Writes the committed seed corpora (fuzz/corpus/<target>/): small, valid-looking inputs of each
format, so that fuzzing starts inside the formats instead of at random bytes. Deterministic (fixed
timestamps), so re-running it changes nothing unless this script changed. Run from anywhere."""
import gzip
import io
import lzma
import os
import struct
import tarfile

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)


def put(target, name, data):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- json: a topology fixture, a calibration, and small documents of every kind of value --------
with open(os.path.join(root, "tests/topo/fixtures/h200_1x.json"), "rb") as f:
    put("json", "topology_h200_1x.json", f.read())
put("json", "calibration.json", """{
  "schema": "arfuse-calibration/1",
  "created": "2026-12-03T00:00:00Z",
  "arfuse": "arfuse 0.1.0",
  "hostname": "h",
  "gpus": ["GPU-a", "GPU-b"],
  "fingerprint": "arfuse-fabric/1 0123",
  "hidden": 7168,
  "dtype": "bf16",
  "groups": [
    {
      "nranks": 2,
      "virtual_ranks": false,
      "best_up_to_bytes": {"oneshot": 14336, "nccl": 28672},
      "notes": ["hoststaged: not eligible"],
      "points": [
        {"algo": "oneshot", "tokens": 1, "bytes": 14336, "us": 5.5},
        {"algo": "nccl", "tokens": 1, "bytes": 14336, "us": 9},
        {"algo": "oneshot", "tokens": 2, "bytes": 28672, "us": 12.25},
        {"algo": "nccl", "tokens": 2, "bytes": 28672, "us": 10}
      ]
    }
  ]
}
""")
put("json", "values.json", '{"a": [1, -0.5e-3, true, false, null, "x\\u00b5\\ud83d\\ude00\\n"], "b": {}, "c": []}')
put("json", "deep.json", "[" * 40 + "]" * 40)

# ---- triage_input: plain, CR/CRLF, escapes, gzip, xz, tar, tar.gz with a long name ----------------
log = (b"[2026-11-29 10:00:01 TP0] Decode batch. #running-req: 1\n"
       b"[2026-11-29 10:00:02 TP1] RuntimeError: CUDA error: an illegal memory access was encountered\n"
       b"arfuse ERROR rank=1 dev=1 sm_90 code=arfusePeerTimeout call=9 comm.cc:1 rank 1 waited 5.0 s for rank 0\n")
put("triage_input", "plain.log", log)
put("triage_input", "cr.log", b"progress 1%\rprogress 50%\r\n\x1b[31mred\x1b[0m\r\r\rend\x1b]0;title\x07\n#033[1mbold")
put("triage_input", "plain.log.gz", gzip.compress(log, mtime=0))
put("triage_input", "plain.log.xz", lzma.compress(log, format=lzma.FORMAT_XZ, preset=1))
put("triage_input", "zstd_magic", b"\x28\xB5\x2F\xFD" + b"\x00" * 16)


def tar(members, fmt, compress=None):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mtime = 0
            t.addfile(ti, io.BytesIO(data))
    raw = buf.getvalue()
    return gzip.compress(raw, mtime=0) if compress == "gz" else raw


put("triage_input", "logs.tar", tar([("rank0.log", log), ("rank1.log.gz", gzip.compress(log, mtime=0))],
                                      tarfile.USTAR_FORMAT))
put("triage_input", "long_gnu.tar.gz", tar([("d/" + "n" * 150 + ".log", log)], tarfile.GNU_FORMAT, "gz"))
put("triage_input", "pax.tar", tar([("p/" + "x" * 120 + ".log", log)], tarfile.PAX_FORMAT))

# ---- rendezvous: mode byte, then the bytes ------------------------------------------------------
def frame(kind, rank, nranks, nonce, payload):
    return struct.pack("<IHHiiQQ", 0x57465241, 2, kind, rank, nranks, nonce, payload)


put("rendezvous", "id_bytes", b"\x00" + struct.pack("<IHH", 0x44495241, 2, 1) + b"\x00" * 120)
put("rendezvous", "id_hex", b"\x00" + b"41524944" + b"0" * 248)
put("rendezvous", "callback_slots", b"\x01\x02\x00\x08" + struct.pack("<IIQQ", 0x41525346, 0, 2, 8) + b"\x11" * 8)
put("rendezvous", "answer_result_auth", b"\x02\x01" + frame(2, 0, 2, 0, 16) + bytes(range(16)))
put("rendezvous", "answer_error_auth", b"\x02\x03" + frame(3, 0, 2, 0, 0) + struct.pack("<I", 2) + b"rank 1 said no")
put("rendezvous", "answer_garbage", b"\x02\x00" + b"ARFW" + b"\xff" * 40)
put("rendezvous", "hello_auth", b"\x03\x01" + frame(1, 1, 2, 0, 8))
put("rendezvous", "hello_wrong_nranks", b"\x03\x01" + frame(1, 1, 3, 0, 8))
put("rendezvous", "hello_plain", b"\x03\x00" + frame(1, 1, 2, 1234, 8) + b"\x00" * 72)

# ---- params: NAME\0VALUE --------------------------------------------------------------------------
for i, (n, v) in enumerate([("ARFUSE_TIMEOUT_MS", "5000"), ("ARFUSE_ALGO", "oneshot"), ("ARFUSE_LOG_LEVEL", "INFO"),
                            ("ARFUSE_BOOTSTRAP_IFNAME", "^docker,lo"), ("ARFUSE_BOOTSTRAP_IFNAME", "=eth0"),
                            ("ARFUSE_BOOTSTRAP_UIDS", "1000,1001"), ("ARFUSE_DEBUG_FILE", "/tmp/arfuse-%p-%h.log"),
                            ("ARFUSE_BOOTSTRAP_ADDR", "fe80::1%lo"), ("ARFUSE_BOOTSTRAP_ADDR", "127.0.0.1"),
                            ("ARFUSE_MAX_BLOCKS", "-1"), ("ARFUSE_TEST_HOST_ID", "h0"),
                            ("ARFUSE_ONESHOT_MAX_BYTES", "1099511627776")]):
    put("params", "%02d_%s" % (i, n.lower()), n + "\0" + v)
