"""arfuse: fused tensor-parallel all-reduce + residual add + RMSNorm.

Pure-Python bindings over the C ABI of libarfuse.so (include/arfuse/arfuse.h) through ctypes. The
library is loaded on first use (see arfuse.load for where it is looked for). PyTorch integration
lives in `arfuse.torch`, imported only when asked for: this package itself never imports torch.
"""
import os
from typing import Dict, Optional

from . import _lib
from ._rendezvous import UniqueId, get_unique_id
from ._types import (CONFIG_MAGIC, DTYPE_ALL, EPILOGUE_MAGIC, MAX_RANKS, Algo, Config, DataType, Epilogue, Op, Quant,
                     Result, ScaleLayout)
from ._version import ABI_VERSION_CODE, __version__
from .comm import Communicator, Plan, add_rmsnorm, destroy_all, group, make_config
from .errors import (ArfuseError, ArfuseLibraryError, CudaError, InternalError, InvalidArgument, InvalidUsage,
                     Mismatch, NcclError, NoDevice, PeerTimeout, SystemFailure, Unsupported, error_class)

__all__ = [
    "__version__", "load", "library_path", "library_version", "build_info", "env",
    "Communicator", "Plan", "add_rmsnorm", "destroy_all", "group", "make_config", "UniqueId", "get_unique_id",
    "Algo", "Config", "DataType", "Op", "Result", "CONFIG_MAGIC", "DTYPE_ALL", "MAX_RANKS",
    "Epilogue", "EPILOGUE_MAGIC", "Quant", "ScaleLayout",
    "ArfuseError", "ArfuseLibraryError", "CudaError", "InternalError", "InvalidArgument", "InvalidUsage",
    "Mismatch", "NcclError", "NoDevice", "PeerTimeout", "SystemFailure", "Unsupported", "error_class",
]


def load(path: Optional[str] = None) -> "_lib.Library":
    """Loads libarfuse.so (once per process) and returns the bound library. Where it is looked for,
    in order: $ARFUSE_LIBRARY_PATH (a file or a folder; $ARFUSE_LIBRARY is an accepted alias);
    `path`; next to this package; build/src/ of the source checkout; the system loader. Raises
    ArfuseLibraryError (not found, missing symbol, version mismatch)."""
    return _lib.load(path)


def library_path() -> str:
    """The file the library was loaded from."""
    return _lib.lib().path


def library_version() -> str:
    """The library's version ("0.1.0"), from arfuseGetVersion."""
    return _lib.lib().version


def build_info() -> str:
    """arfuseGetBuildInfo: "arfuse 0.1.0 cuda 13.0 nccl 2.28.9 archs 90"."""
    return _lib.lib().arfuseGetBuildInfo().decode()


def env() -> Dict[str, str]:
    """The ARFUSE_* variables set in this process's environment (the library reads them once, at
    its first use; ARFUSE_LIBRARY_PATH and its alias ARFUSE_LIBRARY are read by this package). For
    defaults and validation of each variable, run `arfuse doctor` or see docs/environment.md."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("ARFUSE_")}


# The subpackages a user reaches by attribute: arfuse.torch (imported on first access) and
# arfuse.integrations (the engines' plugins).
_SUBPACKAGES = ("integrations", "torch")


def __dir__():
    # dir(arfuse) lists the package's own names (__all__ and the subpackages), not what its modules
    # imported to build them (os, typing, the private modules).
    return sorted(set(__all__) | set(_SUBPACKAGES))


def __getattr__(name: str):
    # The subpackages on first access (PEP 562), so that `import arfuse` never imports torch.
    if name in _SUBPACKAGES:
        import importlib

        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'arfuse' has no attribute {name!r}")
