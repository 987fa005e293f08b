"""Finding and loading libarfuse.so, and the declarative table of its C functions.

Search order (the first that applies wins):
  1. the ARFUSE_LIBRARY_PATH environment variable: the library file, or a folder holding
     libarfuse.so (ARFUSE_LIBRARY, the older name, is accepted as an alias);
  2. the path given to arfuse.load(path);
  3. the libarfuse.so inside this package (`pip install ./python` builds it into the wheel);
  4. build/src/libarfuse.so of the repository, when the package is used from a source checkout;
  5. lib/libarfuse.so.0 of this Python's prefix (`cmake --install build --prefix "$VIRTUAL_ENV"`);
  6. the system loader (LD_LIBRARY_PATH, ldconfig), as libarfuse.so.0 then libarfuse.so.
"""
import ctypes
import os
import sys
import threading
from ctypes import POINTER, c_char_p, c_float, c_int, c_void_p
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ._types import AllGatherFn, Config, Epilogue, PlanStruct, UniqueIdStruct
from ._version import __version__
from .errors import ArfuseError, ArfuseLibraryError, error_class

ENV_VAR = "ARFUSE_LIBRARY_PATH"
ENV_ALIAS = "ARFUSE_LIBRARY"  # the first name of ENV_VAR, still accepted
LIBRARY_NAMES = ("libarfuse.so", "libarfuse.so.0")
BUILD_HINT = "build it first: cmake -S . -B build -G Ninja && cmake --build build"

_Result = c_int  # arfuseResult_t
_Comm = c_void_p  # arfuseComm_t
_Enum = c_int  # arfuseDataType_t, arfuseAlgo_t, arfuseOp_t
_Ptr = c_void_p  # device pointers and cudaStream_t

# Every function of include/arfuse/arfuse.h: (name, restype, argtypes). A test parses the header and
# checks that this table names every declared function with the same number of parameters.
FUNCTIONS: List[Tuple[str, object, list]] = [
    # Configuration
    ("arfuseConfigInit", _Result, [POINTER(Config)]),
    # Library
    ("arfuseGetErrorString", c_char_p, [_Result]),
    ("arfuseGetErrorName", c_char_p, [_Result]),
    ("arfuseGetVersion", _Result, [POINTER(c_int)]),
    ("arfuseGetBuildInfo", c_char_p, []),
    ("arfuseAlgoName", c_char_p, [_Enum]),
    ("arfuseDataTypeName", c_char_p, [_Enum]),
    ("arfuseGetLastError", c_char_p, []),
    # Communicators
    ("arfuseCommInitAll", _Result, [POINTER(_Comm), c_int, POINTER(c_int), POINTER(Config)]),
    ("arfuseGetUniqueId", _Result, [POINTER(UniqueIdStruct)]),
    ("arfuseCommInitRank", _Result, [POINTER(_Comm), c_int, UniqueIdStruct, c_int, c_int, POINTER(Config)]),
    ("arfuseCommInitRankWithAllGather", _Result,
     [POINTER(_Comm), c_int, c_int, c_int, POINTER(Config), AllGatherFn, c_void_p]),
    ("arfuseCommDestroy", _Result, [_Comm]),
    ("arfuseCommRank", _Result, [_Comm, POINTER(c_int)]),
    ("arfuseCommCount", _Result, [_Comm, POINTER(c_int)]),
    ("arfuseCommDevice", _Result, [_Comm, POINTER(c_int)]),
    ("arfuseCommIsVirtual", _Result, [_Comm, POINTER(c_int)]),
    ("arfuseCommGetLastError", c_char_p, [_Comm]),
    ("arfuseCommGetAsyncError", _Result, [_Comm, POINTER(_Result)]),
    ("arfuseCommDumpState", _Result, [_Comm, c_char_p]),
    # Plans
    ("arfuseCommQueryPlan", _Result, [_Comm, _Enum, c_int, c_int, _Enum, POINTER(PlanStruct)]),
    # Collectives
    ("arfuseGroupStart", _Result, []),
    ("arfuseGroupEnd", _Result, []),
    ("arfuseAllReduce", _Result, [_Ptr, _Ptr, c_int, c_int, _Enum, _Comm, _Ptr]),
    ("arfuseAllReduceAddRmsNorm", _Result,
     [_Ptr, _Ptr, _Ptr, c_float, _Ptr, _Ptr, c_int, c_int, _Enum, _Comm, _Ptr]),
    ("arfuseAllReduceEpilogue", _Result, [_Ptr, _Ptr, c_float, POINTER(Epilogue), c_int, c_int, _Enum, _Comm, _Ptr]),
    ("arfuseAddRmsNorm", _Result, [_Ptr, _Ptr, _Ptr, c_float, _Ptr, _Ptr, c_int, c_int, _Enum, _Ptr]),
]

# Functions bound on first use rather than at load, with the feature they belong to: a library built
# before the feature still loads and serves everything else; calling one of these raises
# ArfuseLibraryError naming the symbol (see Library.__getattr__).
MULTI_PROCESS = ("arfuseGetUniqueId", "arfuseCommInitRank", "arfuseCommInitRankWithAllGather")
LAZY: Dict[str, str] = {
    **{name: "multi-process communicators" for name in MULTI_PROCESS},
    "arfuseCommDumpState": "state dumps (the flight recorder)",
    "arfuseAllReduceEpilogue": "extended epilogues (FP8 / NVFP4 outputs, first layer, Gemma weights)",
}
_SIGNATURES = {name: (restype, argtypes) for name, restype, argtypes in FUNCTIONS}


def _version_tuple(code: int) -> Tuple[int, int, int]:
    return code // 10000, (code // 100) % 100, code % 100


def _missing_dependency_hint(error: str) -> str:
    """What to do when the loader found libarfuse.so but not a library it needs."""
    if "libnccl.so" in error:
        return (" NCCL's library is missing: install the NCCL wheel for your CUDA major (pip install "
                "nvidia-nccl-cu13, or -cu12; `pip install ./python` declares it), or put the folder holding "
                "libnccl.so.2 on LD_LIBRARY_PATH.")
    if "libcudart.so" in error:
        return (" The CUDA runtime is missing: put the CUDA toolkit's lib64 folder on LD_LIBRARY_PATH (or run "
                "ldconfig for it), or use the wheel `pip install ./python` builds, which links it statically.")
    return ""


def _resolved(name: str) -> str:
    """The file the dynamic loader actually mapped for `name` (best effort, Linux)."""
    base = os.path.basename(name)
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(" ")[-1]
                if os.path.basename(path).startswith(base):
                    return path
    except OSError:
        pass
    return name


class Library:
    """One loaded libarfuse.so with every function of FUNCTIONS bound as an attribute."""

    def __init__(self, path: str, source: str):
        self.source = source
        try:
            self._cdll = ctypes.CDLL(path)
        except OSError as e:
            hint = _missing_dependency_hint(str(e))
            raise ArfuseLibraryError(
                f"cannot load the arfuse library {path} (found via {source}): {e}." + (hint or
                f" Point {ENV_VAR} at a built libarfuse.so, or {BUILD_HINT}")) from None
        self.path = _resolved(path) if os.sep not in path else os.path.abspath(path)
        for name, restype, argtypes in FUNCTIONS:
            if name in LAZY:
                continue
            try:
                fn = getattr(self._cdll, name)
            except AttributeError:
                raise ArfuseLibraryError(
                    f"{self.path} (found via {source}) has no symbol {name}: the library is too old for the "
                    f"arfuse {__version__} Python package, or it is the wrong file (not libarfuse.so). "
                    f"Rebuild the library or point {ENV_VAR} at a current libarfuse.so") from None
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)
        code = c_int(0)
        if self.arfuseGetVersion(ctypes.byref(code)) != 0:
            raise ArfuseLibraryError(f"{self.path}: arfuseGetVersion failed")
        self.version_code = code.value
        lib_v = _version_tuple(self.version_code)
        pkg_v = tuple(int(p) for p in __version__.split(".")[:3])
        if lib_v[:2] != pkg_v[:2]:
            raise ArfuseLibraryError(
                f"{self.path} is arfuse {lib_v[0]}.{lib_v[1]}.{lib_v[2]} (version code {self.version_code}) but "
                f"this Python package is arfuse {__version__}: major and minor versions must match. Install "
                f"the package from the same checkout as the library, or point {ENV_VAR} at a matching build")

    @property
    def version(self) -> str:
        return "%d.%d.%d" % _version_tuple(self.version_code)

    def has(self, name: str) -> bool:
        """Whether the loaded file exports `name` (for the LAZY functions: whether the feature is built)."""
        return hasattr(self._cdll, name)

    def __getattr__(self, name: str):
        # Only reached for attributes not set in __init__: the LAZY functions, bound (and cached) here.
        if name not in LAZY:
            raise AttributeError(name)
        try:
            fn = getattr(self._cdll, name)
        except AttributeError:
            raise ArfuseLibraryError(
                f"{self.path} (found via {self.source}) has no symbol {name}: this libarfuse.so was built "
                f"before {LAZY[name]} existed, so it cannot serve this call (everything else works). Rebuild "
                f"the library from a current checkout, or point {ENV_VAR} at a current libarfuse.so") from None
        fn.restype, fn.argtypes = _SIGNATURES[name]
        setattr(self, name, fn)
        return fn

    # ---- errors ---------------------------------------------------------------------------------
    def error(self, code: int, comm: Optional[int] = None) -> ArfuseError:
        """The exception for a failed call: its class by code, the library's last-error text."""
        name = self.arfuseGetErrorName(code).decode()
        raw = self.arfuseCommGetLastError(comm) if comm is not None else self.arfuseGetLastError()
        text = (raw or b"").decode(errors="replace")
        if not text:
            text = f"{name}: {self.arfuseGetErrorString(code).decode(errors='replace')}"
        return error_class(code)(code, name, text)

    def check(self, code: int, comm: Optional[int] = None) -> None:
        if code != 0:
            raise self.error(code, comm)


_lock = threading.Lock()
_library: Optional[Library] = None


def _package_candidates() -> List[Path]:
    here = Path(__file__).resolve().parent
    return [here / "libarfuse.so", here / "libarfuse.so.0"]


def _checkout_candidate() -> Optional[Path]:
    root = Path(__file__).resolve().parents[2]
    if (root / "include" / "arfuse" / "arfuse.h").is_file():
        return root / "build" / "src" / "libarfuse.so"
    return None


def _prefix_candidate() -> Path:
    return Path(sys.prefix) / "lib" / "libarfuse.so.0"


def open_library(path: str, source: str = "an explicit path") -> Library:
    """Loads the library at `path` (not cached; arfuse.load is the cached entry point). A folder
    stands for the libarfuse.so (or libarfuse.so.0) inside it."""
    if os.path.isdir(path):
        for name in LIBRARY_NAMES:
            if os.path.isfile(os.path.join(path, name)):
                return Library(os.path.join(path, name), source)
        raise ArfuseLibraryError(
            f"the folder {path} (from {source}) holds no {' or '.join(LIBRARY_NAMES)}. Point {ENV_VAR} at a "
            f"built libarfuse.so (or its folder, e.g. build/src), or {BUILD_HINT}")
    if os.sep in path and not os.path.exists(path):
        raise ArfuseLibraryError(
            f"the arfuse library {path} (from {source}) does not exist. Point {ENV_VAR} at a built "
            f"libarfuse.so, or {BUILD_HINT}")
    return Library(path, source)


def env_library() -> Optional[Tuple[str, str]]:
    """(path, source) named by the environment: ARFUSE_LIBRARY_PATH, else its alias ARFUSE_LIBRARY;
    None when neither is set. Both set to different files is an error (which one was meant?)."""
    primary, alias = os.environ.get(ENV_VAR), os.environ.get(ENV_ALIAS)
    if primary and alias and os.path.realpath(primary) != os.path.realpath(alias):
        raise ArfuseLibraryError(
            f"{ENV_VAR}={primary} and {ENV_ALIAS}={alias} name different files: {ENV_ALIAS} is the older name "
            f"of {ENV_VAR}; unset one of them")
    if primary:
        return primary, f"the {ENV_VAR} environment variable"
    if alias:
        return alias, f"the {ENV_ALIAS} environment variable"
    return None


def _find(path: Optional[str]) -> Library:
    env = env_library()
    if env:
        return open_library(*env)
    if path:
        return open_library(os.fspath(path), "arfuse.load(path)")
    tried = []
    for cand in _package_candidates():
        tried.append(str(cand))
        if cand.exists():
            return open_library(str(cand), "the package folder")
    cand = _checkout_candidate()
    if cand is not None:
        tried.append(str(cand))
        if cand.exists():
            return open_library(str(cand), "the source checkout's build/src")
    cand = _prefix_candidate()
    tried.append(str(cand))
    if cand.exists():
        return open_library(str(cand), "this Python's prefix")
    errors = []
    for soname in ("libarfuse.so.0", "libarfuse.so"):
        tried.append(f"{soname} (system loader)")
        try:
            return Library(soname, "the system loader")
        except ArfuseLibraryError as e:
            if "has no symbol" in str(e) or "major and minor" in str(e) or _missing_dependency_hint(str(e)):
                raise
            errors.append(str(e))
    raise ArfuseLibraryError(
        f"libarfuse.so not found. Tried: {', '.join(tried)}. Set {ENV_VAR}=/path/to/libarfuse.so, "
        f"call arfuse.load(path), or {BUILD_HINT} (then run from the checkout or set {ENV_VAR})")


def load(path: Optional[str] = None) -> Library:
    """Loads libarfuse.so once per process (see the module docstring for the search order) and
    returns it. A later call with a different explicit path is an error: a process uses one library."""
    global _library
    with _lock:
        if _library is not None:
            if path is not None and not (os.environ.get(ENV_VAR) or os.environ.get(ENV_ALIAS)):
                wanted = os.path.abspath(os.fspath(path)) if os.sep in os.fspath(path) else os.fspath(path)
                if os.path.realpath(wanted) != os.path.realpath(_library.path):
                    raise ArfuseLibraryError(
                        f"arfuse is already loaded from {_library.path} (via {_library.source}); cannot switch to "
                        f"{path} in the same process")
            return _library
        _library = _find(path)
        return _library


def lib() -> Library:
    """The loaded library, loading it on first use."""
    return _library if _library is not None else load()
