"""Helpers for the GPU tests: the GPU probe (through arfuse itself), the CUDA runtime through ctypes
(the libcudart that libarfuse.so already loaded), host-side dtype rounding and an fp64 reference."""
import ctypes
import math
import os
import random
import struct

import pytest

import arfuse
from arfuse import DataType


def require_gpu():
    """Skips (with the library's reason) when arfuse cannot create a communicator on device 0."""
    try:
        arfuse.Communicator.init_all([0], max_tokens=1, max_hidden=8)[0].destroy()
    except (arfuse.NoDevice, arfuse.CudaError) as e:
        pytest.skip(f"no usable GPU visible to arfuse: {e}")


def require_torch_multiprocess_gpu(lib, torch):
    """require_gpu, plus what the engine-plugin GPU tests need: torch seeing the GPU and this library's
    multi-process functions (skipped with the reason otherwise)."""
    require_gpu()
    if not torch.cuda.is_available():
        pytest.skip("arfuse sees a GPU but torch.cuda.is_available() is False (CPU-only torch build?)")
    from arfuse._lib import MULTI_PROCESS

    missing = [n for n in MULTI_PROCESS if not lib.has(n)]
    if missing:
        pytest.skip(f"this libarfuse.so has no multi-process functions ({', '.join(missing)})")


class Cuda:
    """The few CUDA runtime calls the raw-pointer tests need."""

    def __init__(self):
        arfuse.load()
        path = None
        with open("/proc/self/maps") as maps:
            for line in maps:
                p = line.rstrip("\n").split(" ")[-1]
                if os.path.basename(p).startswith("libcudart.so"):
                    path = p
                    break
        self.rt = ctypes.CDLL(path or "libcudart.so")
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        self.rt.cudaGetErrorString.restype = ctypes.c_char_p
        for name, args in {"cudaMalloc": [ctypes.POINTER(vp), sz], "cudaFree": [vp],
                           "cudaMemcpy": [vp, vp, sz, ctypes.c_int], "cudaMemset": [vp, ctypes.c_int, sz],
                           "cudaStreamCreate": [ctypes.POINTER(vp)], "cudaStreamDestroy": [vp],
                           "cudaStreamSynchronize": [vp], "cudaDeviceSynchronize": [],
                           "cudaStreamBeginCapture": [vp, ctypes.c_int],
                           "cudaStreamEndCapture": [vp, ctypes.POINTER(vp)],
                           "cudaGraphInstantiate": [ctypes.POINTER(vp), vp, ctypes.c_ulonglong],
                           "cudaGraphLaunch": [vp, vp], "cudaGraphDestroy": [vp],
                           "cudaGraphExecDestroy": [vp]}.items():
            fn = getattr(self.rt, name)
            fn.argtypes, fn.restype = args, ctypes.c_int

    def ok(self, code, what):
        assert code == 0, f"{what}: {self.rt.cudaGetErrorString(code).decode()}"

    def malloc(self, nbytes):
        p = ctypes.c_void_p()
        self.ok(self.rt.cudaMalloc(ctypes.byref(p), nbytes), "cudaMalloc")
        return p.value

    def upload(self, dev, data: bytes):
        buf = ctypes.create_string_buffer(data, len(data))
        self.ok(self.rt.cudaMemcpy(dev, buf, len(data), 1), "cudaMemcpy H2D")

    def download(self, dev, nbytes) -> bytes:
        buf = ctypes.create_string_buffer(nbytes)
        self.ok(self.rt.cudaMemcpy(buf, dev, nbytes, 2), "cudaMemcpy D2H")
        return buf.raw

    def stream(self):
        s = ctypes.c_void_p()
        self.ok(self.rt.cudaStreamCreate(ctypes.byref(s)), "cudaStreamCreate")
        return s.value

    def sync(self, stream=None):
        if stream is None:
            self.ok(self.rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
        else:
            self.ok(self.rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize")

    def capture(self, stream, enqueue):
        """A graph exec of what enqueue() issues on `stream` (thread-local capture mode)."""
        self.ok(self.rt.cudaStreamBeginCapture(stream, 1), "cudaStreamBeginCapture")
        graph = ctypes.c_void_p()
        try:
            enqueue()
        finally:
            self.ok(self.rt.cudaStreamEndCapture(stream, ctypes.byref(graph)), "cudaStreamEndCapture")
        exe = ctypes.c_void_p()
        self.ok(self.rt.cudaGraphInstantiate(ctypes.byref(exe), graph, 0), "cudaGraphInstantiate")
        self.rt.cudaGraphDestroy(graph)
        return exe.value


# ---- host-side values in the three dtypes -----------------------------------------------------------
def round_to(dtype: DataType, v: float) -> float:
    """v rounded to `dtype` (round to nearest even), as a Python float."""
    if dtype == DataType.Float32:
        return struct.unpack("<f", struct.pack("<f", v))[0]
    if dtype == DataType.Float16:
        return struct.unpack("<e", struct.pack("<e", v))[0]
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # RNE to the upper 16 bits (finite values)
    return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]


def pack(dtype: DataType, values) -> bytes:
    if dtype == DataType.Float32:
        return struct.pack(f"<{len(values)}f", *values)
    if dtype == DataType.Float16:
        return struct.pack(f"<{len(values)}e", *values)
    return b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", round_to(dtype, v)))[0])[2:]
                    for v in values)


def unpack(dtype: DataType, data: bytes):
    n = len(data) // dtype.itemsize
    if dtype == DataType.Float32:
        return list(struct.unpack(f"<{n}f", data))
    if dtype == DataType.Float16:
        return list(struct.unpack(f"<{n}e", data))
    return [struct.unpack("<f", b"\0\0" + data[2 * i:2 * i + 2])[0] for i in range(n)]


def random_values(rng: random.Random, n: int):
    """Multiples of 1/8 in [-4, 4]: exact in every dtype, so sums are exact before the final rounding."""
    return [rng.randint(-32, 32) / 8.0 for _ in range(n)]


def reference(dtype, xs, residual, weight, eps, tokens, hidden):
    """fp64 reference of the fused op: (norm_out, residual_out), rounded to dtype as the library does."""
    res_out, norm = [], []
    for t in range(tokens):
        row = [round_to(dtype, residual[t * hidden + h] + sum(x[t * hidden + h] for x in xs)) for h in range(hidden)]
        scale = 1.0 / math.sqrt(sum(v * v for v in row) / hidden + eps)
        res_out += row
        norm += [round_to(dtype, v * scale * weight[h]) for h, v in enumerate(row)]
    return norm, res_out


def ulp_tolerance(dtype: DataType) -> float:
    """Relative tolerance for norm_out: two units in the last place of the dtype."""
    return {DataType.Bfloat16: 2 ** -7, DataType.Float16: 2 ** -10, DataType.Float32: 2 ** -22}[dtype]
