"""What multi-process communicators need before the library can be called: the unique id that rank 0
hands to every other process, and the bridge that lets a Python all-gather (torch.distributed, MPI,
a test's queues) serve as the C callback arfuseAllGatherFn_t."""
import binascii
import ctypes
from typing import Any, Callable, Optional, Sequence, Union

from . import _lib
from ._coerce import bad
from ._types import UNIQUE_ID_BYTES, AllGatherFn, UniqueIdStruct

BytesLike = Union[bytes, bytearray, memoryview]


class UniqueId:
    """arfuseUniqueId: 128 opaque bytes made by rank 0 (UniqueId.generate, i.e. arfuseGetUniqueId)
    and shipped to every other rank of the group by any means: `bytes(uid)` / `UniqueId(data)`, or
    `uid.hex()` / `UniqueId.from_hex(text)` (256 hex digits, for an environment variable or a command
    line). It pickles, so a multiprocessing queue carries it as is.

    The id names rank 0's rendezvous listener, which lives in the process that generated it: that
    process (or a child it forks afterwards) must be rank 0, and each id serves one group creation.
    The bytes are checked by the library (magic, version, checksum); this class only checks the size.
    """

    __slots__ = ("_data",)
    SIZE = UNIQUE_ID_BYTES

    def __init__(self, data: BytesLike):
        if isinstance(data, UniqueId):
            data = data._data
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise bad(f"unique_id: {type(data).__name__} is not bytes: pass the {UNIQUE_ID_BYTES} bytes of a "
                      f"UniqueId (bytes(uid)), or use UniqueId.from_hex for its 256 hex digits")
        data = bytes(data)
        if len(data) != UNIQUE_ID_BYTES:
            raise bad(f"unique_id has {len(data)} bytes: an arfuse unique id is exactly {UNIQUE_ID_BYTES} bytes "
                      f"(was it truncated, or is it hex text? then use UniqueId.from_hex)")
        self._data = data

    @classmethod
    def generate(cls) -> "UniqueId":
        """arfuseGetUniqueId: starts rank 0's rendezvous listener in this process and returns its id.
        Call it in rank 0's process only, once per group creation."""
        lib = _lib.lib()
        raw = UniqueIdStruct()
        lib.check(lib.arfuseGetUniqueId(ctypes.byref(raw)))
        return cls(bytes(raw.internal))

    @classmethod
    def from_hex(cls, text: Union[str, bytes]) -> "UniqueId":
        """The id from the 256 hex digits of uid.hex() (surrounding whitespace is ignored)."""
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("ascii", errors="replace")
        if not isinstance(text, str):
            raise bad(f"unique_id: from_hex takes a str of {2 * UNIQUE_ID_BYTES} hex digits, "
                      f"got {type(text).__name__}")
        text = text.strip()
        if len(text) != 2 * UNIQUE_ID_BYTES:
            raise bad(f"unique_id hex text has {len(text)} characters: expected {2 * UNIQUE_ID_BYTES} hex digits "
                      f"(uid.hex() of rank 0's id)")
        try:
            return cls(binascii.unhexlify(text))
        except (binascii.Error, ValueError):
            raise bad("unique_id hex text is not hexadecimal: expected the output of uid.hex()") from None

    @classmethod
    def coerce(cls, value: Any) -> "UniqueId":
        """A UniqueId from a UniqueId, its bytes, or its hex text."""
        if isinstance(value, UniqueId):
            return value
        if isinstance(value, str):
            return cls.from_hex(value)
        return cls(value)

    def hex(self) -> str:
        return self._data.hex()

    def __bytes__(self) -> bytes:
        return self._data

    def to_bytes(self) -> bytes:
        return self._data

    def _as_struct(self) -> UniqueIdStruct:
        raw = UniqueIdStruct()
        ctypes.memmove(ctypes.addressof(raw), self._data, UNIQUE_ID_BYTES)
        return raw

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UniqueId) and other._data == self._data

    def __hash__(self) -> int:
        return hash(self._data)

    def __reduce__(self):
        return (UniqueId, (self._data,))

    def __repr__(self) -> str:
        return f"<arfuse.UniqueId {self._data[:8].hex()}...>"


def get_unique_id() -> UniqueId:
    """arfuseGetUniqueId (rank 0 only): see UniqueId.generate."""
    return UniqueId.generate()


AllGather = Callable[[bytes], Union[BytesLike, Sequence[BytesLike]]]


class AllGatherBridge:
    """Wraps a Python all-gather as the C callback of arfuseCommInitRankWithAllGather.

    `fn(mine: bytes)` must return every rank's bytes in rank order: either their concatenation
    (nranks * len(mine) bytes) or a sequence of nranks byte strings of len(mine) each (what
    torch.distributed.all_gather_object produces). Anything else, and any exception raised by `fn`
    (KeyboardInterrupt included), becomes a nonzero return to the library, which then fails the
    init; the first Python exception is kept in `.error` so the caller can chain it. `c_fn` is the
    ctypes function pointer; it must stay referenced while the library may call it, which this
    object ensures as long as it is alive.
    """

    def __init__(self, fn: AllGather, nranks: int, rank: int):
        if not callable(fn):
            raise bad(f"all_gather: {type(fn).__name__} is not callable: pass a function (mine: bytes) -> bytes")
        self.fn = fn
        self.nranks = nranks
        self.rank = rank
        self.calls = 0
        self.error: Optional[BaseException] = None
        self.c_fn = AllGatherFn(self._call)

    def gathered(self, mine: bytes) -> bytes:
        """fn(mine), checked and joined: nranks * len(mine) bytes. Raises ValueError/TypeError."""
        out = self.fn(mine)
        n, size = self.nranks, len(mine)
        if isinstance(out, (list, tuple)):
            if len(out) != n:
                raise ValueError(f"the all_gather callable returned {len(out)} parts; expected one per rank ({n})")
            for i, part in enumerate(out):
                if not isinstance(part, (bytes, bytearray, memoryview)):
                    raise TypeError(f"the all_gather callable's part {i} is {type(part).__name__}, not bytes")
                if len(bytes(part)) != size:
                    raise ValueError(f"the all_gather callable's part {i} has {len(bytes(part))} bytes; every "
                                     f"rank sent {size}")
            out = b"".join(bytes(p) for p in out)
        elif isinstance(out, (bytes, bytearray, memoryview)):
            out = bytes(out)
            if len(out) != n * size:
                raise ValueError(f"the all_gather callable returned {len(out)} bytes; expected nranks x {size} = "
                                 f"{n * size} (every rank's bytes, concatenated in rank order)")
        else:
            raise TypeError(f"the all_gather callable returned {type(out).__name__}: return bytes (all ranks', "
                            f"concatenated) or a list of one bytes object per rank")
        if out[self.rank * size:(self.rank + 1) * size] != mine:
            raise ValueError(f"the all_gather callable's result does not hold this rank's bytes at offset "
                             f"rank x {size} = {self.rank * size}: the group orders ranks differently from "
                             f"arfuse's rank={self.rank}, or the callable did not gather")
        return out

    def _call(self, ctx: Optional[int], mine: Optional[int], all_: Optional[int], nbytes: int) -> int:
        # Never let an exception reach ctypes: it would print it and return 0, i.e. "success".
        self.calls += 1
        try:
            data = ctypes.string_at(mine, nbytes) if nbytes else b""
            out = self.gathered(data)
            if out:
                if not all_:
                    raise ValueError("the library passed a NULL result buffer")
                ctypes.memmove(all_, out, len(out))
            return 0
        except BaseException as e:  # noqa: B902 - KeyboardInterrupt too: the C caller must see a failure
            if self.error is None:
                self.error = e
            return 1
