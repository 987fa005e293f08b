"""Shared set-up: the package from python/ of this checkout and the REAL library from the build.

The library is $ARFUSE_LIBRARY_PATH (a file or its folder; $ARFUSE_LIBRARY, the older name, is read
when it is unset) or build/src/libarfuse.so of the repository root. It is exported as
ARFUSE_LIBRARY_PATH, and ARFUSE_LIBRARY removed, so that subprocesses started by the tests find the
same file.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "include" / "arfuse" / "arfuse.h"
PACKAGE_DIR = ROOT / "python"

if str(PACKAGE_DIR) not in sys.path:
    sys.path.insert(0, str(PACKAGE_DIR))

_var = "ARFUSE_LIBRARY_PATH" if os.environ.get("ARFUSE_LIBRARY_PATH") else "ARFUSE_LIBRARY"
_env = os.environ.get(_var)
LIBRARY = Path(_env) if _env else ROOT / "build" / "src" / "libarfuse.so"
if LIBRARY.is_dir():
    LIBRARY = LIBRARY / "libarfuse.so"
LIBRARY_MISSING = None if LIBRARY.is_file() else (
    f"the arfuse library {LIBRARY} does not exist"
    f"{f' (from {_var})' if _env else ''}: build it first: "
    f"cmake -S . -B build -G Ninja && cmake --build build (or set ARFUSE_LIBRARY_PATH=/path/to/libarfuse.so)")
if LIBRARY_MISSING is None:
    os.environ["ARFUSE_LIBRARY_PATH"] = str(LIBRARY)
    os.environ.pop("ARFUSE_LIBRARY", None)


@pytest.fixture(autouse=True, scope="session")
def _library_built():
    if LIBRARY_MISSING:
        pytest.fail(LIBRARY_MISSING, pytrace=False)


@pytest.fixture(scope="session")
def lib():
    import arfuse

    return arfuse.load()


def run_python(code: str, env_update=None, drop=()):
    """Runs `code` in a fresh interpreter with python/ on sys.path; returns the CompletedProcess."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PACKAGE_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    for k in drop:
        env.pop(k, None)
    env.update(env_update or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120)


def find_cc():
    import shutil

    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None
