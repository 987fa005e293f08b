"""Exceptions. Every failing arfuse call raises an ArfuseError subclass chosen by its result code,
carrying the library's last-error text (which names the argument or the failing call)."""
from typing import Dict, Optional, Type

from ._types import Result


class ArfuseLibraryError(OSError):
    """libarfuse.so could not be found or loaded, lacks a symbol, or has an incompatible version."""


class ArfuseError(RuntimeError):
    """A call into arfuse failed.

    Attributes: `code` (a Result), `name` ("arfuseInvalidArgument"), `message` (the library's
    last-error text for the failing call, or the generic text of the code when there is none).
    """

    def __init__(self, code: int, name: str, message: str):
        try:
            code = Result(code)
        except ValueError:
            pass
        self.code = code
        self.name = name
        self.message = message
        text = message if message.startswith(name) else f"{name}: {message}"
        super().__init__(text)

    def __reduce__(self):  # picklable across processes (e.g. multiprocessing)
        return (_rebuild, (int(self.code), self.name, self.message))


def _rebuild(code: int, name: str, message: str) -> "ArfuseError":
    return error_class(code)(code, name, message)


class InvalidArgument(ArfuseError, ValueError):
    """arfuseInvalidArgument: an argument is wrong; the message names it and says what is allowed."""


class InvalidUsage(ArfuseError):
    """arfuseInvalidUsage: not allowed in this state (destroyed communicator, unmatched group end)."""


class Unsupported(ArfuseError):
    """arfuseUnsupported: a valid request this build or machine cannot serve; the message says why."""


class CudaError(ArfuseError):
    """arfuseCudaError: a CUDA runtime call failed; the message names it."""


class NcclError(ArfuseError):
    """arfuseNcclError: an NCCL call failed."""


class SystemFailure(ArfuseError):
    """arfuseSystemError: host allocation or OS failure (named so as not to shadow the builtin)."""


class InternalError(ArfuseError):
    """arfuseInternalError: a bug in arfuse; please report it with the log line."""


class PeerTimeout(ArfuseError):
    """arfusePeerTimeout: a device-side wait for a peer exceeded the timeout; the group is aborted."""


class NoDevice(ArfuseError):
    """arfuseNoDevice: no CUDA device is visible."""


class Mismatch(ArfuseError):
    """arfuseMismatch: ranks made different calls; the group is aborted."""


_BY_CODE: Dict[int, Type[ArfuseError]] = {
    Result.InvalidArgument: InvalidArgument,
    Result.InvalidUsage: InvalidUsage,
    Result.Unsupported: Unsupported,
    Result.CudaError: CudaError,
    Result.NcclError: NcclError,
    Result.SystemError: SystemFailure,
    Result.InternalError: InternalError,
    Result.PeerTimeout: PeerTimeout,
    Result.NoDevice: NoDevice,
    Result.Mismatch: Mismatch,
}


def error_class(code: int) -> Type[ArfuseError]:
    """The exception class raised for a result code (ArfuseError itself for unknown codes)."""
    return _BY_CODE.get(code, ArfuseError)


def python_error(code: Result, message: str, cls: Optional[Type[ArfuseError]] = None) -> ArfuseError:
    """An error detected by the Python layer before calling the library, in the library's format."""
    name = "arfuse" + code.name
    return (cls or error_class(code))(code, name, f"{name}: {message}")
