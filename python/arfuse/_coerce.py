"""Conversions of user arguments to what the C ABI takes; bad values raise InvalidArgument naming
the argument, before the library is called."""
import ctypes
from typing import Any, Optional

from ._types import _DTYPE_ALIASES, _OP_ALIASES, Algo, DataType, Op, Result
from .errors import InvalidArgument, python_error

_INT_MIN, _INT_MAX = -(2 ** 31), 2 ** 31 - 1


def bad(message: str) -> InvalidArgument:
    return python_error(Result.InvalidArgument, message)  # type: ignore[return-value]


def c_int_arg(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = value.__index__()  # numpy / torch integer scalars
        except (AttributeError, TypeError):
            raise bad(f"{name}={value!r}: must be an int") from None
    if not _INT_MIN <= value <= _INT_MAX:
        raise bad(f"{name}={value}: does not fit a C int")
    return int(value)


def dtype_arg(value: Any, name: str = "dtype") -> DataType:
    if isinstance(value, DataType):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return DataType(value)
        except ValueError:
            raise bad(f"{name}={value}: use a DataType (bf16=0, fp16=1, fp32=2)") from None
    text = str(value).lower()
    text = text[len("torch."):] if text.startswith("torch.") else text
    if text in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[text]
    raise bad(f"{name}={value!r}: arfuse supports bf16, fp16 and fp32 (DataType or a name such as 'bf16')")


def op_arg(value: Any) -> Op:
    if isinstance(value, Op):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return Op(value)
    if isinstance(value, str) and value.lower() in _OP_ALIASES:
        return _OP_ALIASES[value.lower()]
    raise bad(f"op={value!r}: use Op.AllReduce or Op.AllReduceAddRmsNorm ('all_reduce' / 'all_reduce_add_rmsnorm')")


def algo_arg(value: Any) -> int:
    """-1 (default) for None; else an Algo, its integer value or its label ("oneshot")."""
    if value is None:
        return -1
    if isinstance(value, str):
        try:
            return int(Algo.from_label(value.lower()))
        except ValueError as e:
            raise bad(f"algo={value!r}: {e}") from None
    return c_int_arg("algo", value)


def ptr_arg(name: str, value: Any) -> Optional[int]:
    """A device address from an int, None (NULL), a ctypes pointer, an object with
    __cuda_array_interface__, or an object with data_ptr() (a torch tensor)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise bad(f"{name}={value!r}: expected a device pointer")
    if isinstance(value, int):
        if value < 0 or value >= 2 ** 64:
            raise bad(f"{name}={value:#x}: not a pointer value")
        return value or None
    if isinstance(value, ctypes.c_void_p):
        return value.value
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0]) or None
    data_ptr = getattr(value, "data_ptr", None)
    if callable(data_ptr):
        return int(data_ptr()) or None
    raise bad(f"{name}: {type(value).__name__} is not a pointer: pass an int address, an object with "
              f"__cuda_array_interface__, or a tensor with data_ptr()")


def stream_arg(value: Any) -> Optional[int]:
    """A cudaStream_t from None/0 (legacy default stream), an int handle, a torch.cuda.Stream
    (.cuda_stream), a CuPy stream (.ptr), or an object implementing __cuda_stream__."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value or None
    proto = getattr(value, "__cuda_stream__", None)
    if proto is not None:
        handle = proto() if callable(proto) else proto
        return int(handle[1]) or None
    for attr in ("cuda_stream", "ptr", "handle"):
        h = getattr(value, attr, None)
        if isinstance(h, int):
            return h or None
    raise bad(f"stream: {type(value).__name__} is not a CUDA stream: pass an int cudaStream_t or a torch.cuda.Stream")
