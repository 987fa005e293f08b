"""Finding and loading libarfuse.so: search order, clear errors for a wrong path, a library missing
a symbol (libc, and a stub missing one arfuse function) and a version mismatch."""
import ctypes.util
import os
import re
import subprocess

import pytest

import arfuse
from arfuse import _lib
from conftest import HEADER, LIBRARY, ROOT, find_cc, run_python

_ENV_VARS = ("ARFUSE_LIBRARY_PATH", "ARFUSE_LIBRARY")  # the variable and its older name (an alias)


def _libc_path():
    for cand in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6", "/usr/lib/libc.so.6",
                 "/lib/aarch64-linux-gnu/libc.so.6"):
        if os.path.exists(cand):
            return cand
    return None


def test_real_library_loads_and_reports_itself(lib):
    assert os.path.realpath(lib.path) == os.path.realpath(str(LIBRARY))
    assert lib.source == "the ARFUSE_LIBRARY_PATH environment variable"
    assert arfuse.library_version() == arfuse.__version__ == "0.1.0"
    assert lib.version_code == arfuse.ABI_VERSION_CODE == 100
    info = arfuse.build_info()
    assert re.match(r"^arfuse 0\.1\.0 cuda \d+\.\d+ nccl \d+\.\d+\.\d+ archs \S+", info), info


def test_package_version_matches_header():
    text = HEADER.read_text()
    parts = [re.search(rf"#define ARFUSE_VERSION_{k} (\d+)", text).group(1) for k in ("MAJOR", "MINOR", "PATCH")]
    assert ".".join(parts) == arfuse.__version__
    major, minor, patch = map(int, parts)
    assert arfuse.ABI_VERSION_CODE == major * 10000 + minor * 100 + patch


def test_function_table_covers_the_header():
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    declared = {}
    for m in re.finditer(r"ARFUSE_API\s+[\w\s\*]+?\b(arfuse\w+)\s*\(([^)]*)\)\s*;", text):
        params = m.group(2).strip()
        declared[m.group(1)] = 0 if params in ("", "void") else params.count(",") + 1
    table = {name: len(argtypes) for name, _, argtypes in _lib.FUNCTIONS}
    assert len(declared) == 27, sorted(declared)
    assert table == declared
    assert set(_lib.LAZY) <= set(table)


def test_wrong_path_is_a_clear_error():
    with pytest.raises(arfuse.ArfuseLibraryError) as e:
        _lib.open_library("/nonexistent/dir/libarfuse.so")
    assert "/nonexistent/dir/libarfuse.so" in str(e.value)
    assert "does not exist" in str(e.value)
    assert "cmake -S . -B build -G Ninja && cmake --build build" in str(e.value)


def test_wrong_env_var_is_a_clear_error_and_import_still_works():
    for var in ("ARFUSE_LIBRARY_PATH", "ARFUSE_LIBRARY"):
        r = run_python("""
            import arfuse  # importing never loads the library
            try:
                arfuse.load()
            except arfuse.ArfuseLibraryError as e:
                print("ERR", e)
        """, env_update={var: "/nonexistent/libarfuse.so"}, drop=_ENV_VARS)
        assert r.returncode == 0, r.stderr
        assert f"ERR the arfuse library /nonexistent/libarfuse.so (from the {var} environment variable) " \
               "does not exist. Point ARFUSE_LIBRARY_PATH at a built libarfuse.so" in r.stdout


def test_library_path_variable_alias_and_folder(tmp_path):
    code = """
        import os
        import arfuse
        try:
            lib = arfuse.load()
            print("SOURCE", lib.source)
            print("PATH", os.path.realpath(lib.path))
        except arfuse.ArfuseLibraryError as e:
            print("ERR", e)
    """
    # ARFUSE_LIBRARY_PATH names the file, or the folder that holds it.
    for value in (str(LIBRARY), str(LIBRARY.parent)):
        r = run_python(code, env_update={"ARFUSE_LIBRARY_PATH": value}, drop=_ENV_VARS)
        assert r.returncode == 0, r.stderr
        assert "SOURCE the ARFUSE_LIBRARY_PATH environment variable" in r.stdout, r.stdout
        assert f"PATH {os.path.realpath(str(LIBRARY))}" in r.stdout  # the folder's libarfuse.so is a link to it
    # ARFUSE_LIBRARY, the older name, still works alone and agrees with the new one when both are set.
    r = run_python(code, env_update={"ARFUSE_LIBRARY": str(LIBRARY)}, drop=_ENV_VARS)
    assert "SOURCE the ARFUSE_LIBRARY environment variable" in r.stdout, r.stdout + r.stderr
    r = run_python(code, env_update={"ARFUSE_LIBRARY": str(LIBRARY), "ARFUSE_LIBRARY_PATH": str(LIBRARY)},
                   drop=_ENV_VARS)
    assert "SOURCE the ARFUSE_LIBRARY_PATH environment variable" in r.stdout, r.stdout + r.stderr
    # Two different files: which was meant? An error, not a guess.
    r = run_python(code, env_update={"ARFUSE_LIBRARY": "/other/libarfuse.so", "ARFUSE_LIBRARY_PATH": str(LIBRARY)},
                   drop=_ENV_VARS)
    assert (f"ERR ARFUSE_LIBRARY_PATH={LIBRARY} and ARFUSE_LIBRARY=/other/libarfuse.so name different files: "
            "ARFUSE_LIBRARY is the older name of ARFUSE_LIBRARY_PATH; unset one of them") in r.stdout
    # A folder without the library says so.
    r = run_python(code, env_update={"ARFUSE_LIBRARY_PATH": str(tmp_path)}, drop=_ENV_VARS)
    assert (f"ERR the folder {tmp_path} (from the ARFUSE_LIBRARY_PATH environment variable) holds no libarfuse.so "
            "or libarfuse.so.0") in r.stdout


def test_library_without_arfuse_symbols_names_the_symbol():
    libc = _libc_path() or ctypes.util.find_library("c")
    if not libc:
        pytest.skip("no libc found to stand in for a wrong library")
    with pytest.raises(arfuse.ArfuseLibraryError) as e:
        _lib.open_library(libc)
    msg = str(e.value)
    assert "has no symbol arfuseConfigInit" in msg  # the first entry of the table
    assert "too old" in msg and "wrong file" in msg
    assert os.path.basename(libc) in msg


def _stub_library(tmp_path, version_code, skip=()):
    """A shared library defining every table function except `skip`, with the given version code."""
    cc = find_cc()
    if cc is None:
        pytest.skip("no C compiler (cc/gcc/clang) to build a stub library")
    lines = ["#include <stddef.h>"]
    for name, _, _ in _lib.FUNCTIONS:
        if name in skip:
            continue
        if name == "arfuseGetVersion":
            lines.append(f"int arfuseGetVersion(int* v) {{ *v = {version_code}; return 0; }}")
        else:
            lines.append(f"void* {name}(void) {{ return NULL; }}")
    src = tmp_path / "stub.c"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "libstub.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(src)], check=True, capture_output=True)
    return str(out)


def test_too_old_library_missing_one_function(tmp_path):
    path = _stub_library(tmp_path, 100, skip={"arfuseAddRmsNorm"})
    with pytest.raises(arfuse.ArfuseLibraryError) as e:
        _lib.open_library(path)
    assert f"{path} (found via an explicit path) has no symbol arfuseAddRmsNorm" in str(e.value)
    assert "too old for the arfuse 0.1.0 Python package" in str(e.value)


def test_version_mismatch_is_refused(tmp_path):
    path = _stub_library(tmp_path, 200)  # 0.2.0
    with pytest.raises(arfuse.ArfuseLibraryError) as e:
        _lib.open_library(path)
    assert "is arfuse 0.2.0 (version code 200) but this Python package is arfuse 0.1.0" in str(e.value)
    assert "major and minor versions must match" in str(e.value)
    # Only the patch differs: accepted.
    patch_dir = tmp_path / "patch"
    patch_dir.mkdir()
    assert _lib.open_library(_stub_library(patch_dir, 105)).version == "0.1.5"


def test_explicit_path_and_env_precedence():
    # No ARFUSE_LIBRARY: the path given to load() is used.
    r = run_python(f"""
        import arfuse
        lib = arfuse.load({str(LIBRARY)!r})
        print("SOURCE", lib.source)
        print("PATH", arfuse.library_path())
    """, drop=_ENV_VARS)
    assert r.returncode == 0, r.stderr
    assert "SOURCE arfuse.load(path)" in r.stdout
    assert f"PATH {os.path.abspath(str(LIBRARY))}" in r.stdout
    # ARFUSE_LIBRARY_PATH (or its alias) comes first in the search order, even over an explicit path.
    for var in _ENV_VARS:
        r = run_python("""
            import arfuse
            print("SOURCE", arfuse.load("/nonexistent/libarfuse.so").source)
        """, env_update={var: str(LIBRARY)}, drop=_ENV_VARS)
        assert r.returncode == 0, r.stderr
        assert f"SOURCE the {var} environment variable" in r.stdout


def test_a_process_uses_one_library():
    libc = _libc_path()
    if not libc:
        pytest.skip("no libc path to try as a second library")
    r = run_python(f"""
        import arfuse
        arfuse.load({str(LIBRARY)!r})
        arfuse.load({str(LIBRARY)!r})  # the same file again is fine
        try:
            arfuse.load({libc!r})
        except arfuse.ArfuseLibraryError as e:
            print("ERR", e)
    """, drop=_ENV_VARS)
    assert r.returncode == 0, r.stderr
    assert "ERR arfuse is already loaded from" in r.stdout and "cannot switch to" in r.stdout


def test_checkout_build_dir_is_searched():
    # From this checkout, with no env var and no path, build/src/libarfuse.so is the candidate after the
    # package folder; whether it exists depends on the build directory used.
    cand = _lib._checkout_candidate()
    assert cand == ROOT / "build" / "src" / "libarfuse.so"
    r = run_python("""
        import arfuse
        try:
            lib = arfuse.load()
            print("SOURCE", lib.source)
        except arfuse.ArfuseLibraryError as e:
            print("ERR", e)
    """, drop=_ENV_VARS)
    assert r.returncode == 0, r.stderr
    if cand.exists():
        assert "SOURCE the source checkout's build/src" in r.stdout
    else:
        assert "ERR libarfuse.so not found. Tried:" in r.stdout
        assert str(cand) in r.stdout and "Set ARFUSE_LIBRARY_PATH=/path/to/libarfuse.so" in r.stdout


def test_core_package_never_imports_torch():
    r = run_python("""
        import sys
        sys.modules["torch"] = None  # as if torch were not installed
        import arfuse
        print("LOADED", "torch" in sys.modules and sys.modules["torch"] is not None)
        print("INFO", arfuse.build_info())
        try:
            import arfuse.torch
        except ImportError as e:
            print("IMPORTERROR", e)
    """)
    assert r.returncode == 0, r.stderr
    assert "LOADED False" in r.stdout
    assert "INFO arfuse 0.1.0" in r.stdout
    assert "IMPORTERROR arfuse.torch needs PyTorch (pip install torch)" in r.stdout


def test_import_arfuse_does_not_import_torch_even_when_installed():
    r = run_python("import sys, arfuse; arfuse.load(); print('TORCH', 'torch' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert "TORCH False" in r.stdout


def test_env_lists_arfuse_variables(monkeypatch):
    monkeypatch.setenv("ARFUSE_TIMEOUT_MS", "1234")
    e = arfuse.env()
    assert e["ARFUSE_TIMEOUT_MS"] == "1234"
    assert e["ARFUSE_LIBRARY_PATH"] == os.environ["ARFUSE_LIBRARY_PATH"]
    assert all(k.startswith("ARFUSE_") for k in e)


def test_the_package_environment_names_are_known_to_the_library(lib):
    """Every ARFUSE_* name the Python package, its build and its tests read is one the library knows
    (its own parameter or one it lists as read elsewhere): otherwise every engine that sets
    ARFUSE_SGLANG=1 gets a WARN 'is not an arfuse variable' in its log. A misspelt name still gets it."""
    header_macros = set(re.findall(r"#define\s+(ARFUSE_[A-Z0-9_]+)", HEADER.read_text()))
    names = set()
    for folder in ("python", "tests/python", "scripts", "bench", "examples"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".sh", ".toml") and path.is_file():
                names |= set(re.findall(r"[\"'](ARFUSE_[A-Z0-9_]+)[\"']", path.read_text(errors="replace")))
    names -= header_macros
    # CMake options the build backend passes as -D definitions (python/pyproject.toml), not variables.
    names -= set(re.findall(r"option\((ARFUSE_[A-Z0-9_]+)", (ROOT / "CMakeLists.txt").read_text()))
    names.discard("ARFUSE_SGLANGG")  # the control below
    names = {n for n in names if not n.startswith("ARFUSE_TEST_")}  # reserved for tests by the library
    assert "ARFUSE_SGLANG" in names and "ARFUSE_VLLM_MAX_TOKENS" in names, sorted(names)
    keep = {"ARFUSE_LIBRARY_PATH", "ARFUSE_LIBRARY"}  # set already: where the library is
    env = {n: "1" for n in names - keep}
    env["ARFUSE_SGLANGG"] = "1"  # a misspelling: the control
    # Any logged failure makes the library read (and check) the environment.
    r = run_python("from arfuse import _lib\n_lib.lib().arfuseConfigInit(None)\n", env_update=env)
    assert "ARFUSE_SGLANGG is not an arfuse variable" in r.stderr, r.stderr[-2000:]
    unknown = sorted(n for n in names if f"{n} is not an arfuse variable" in r.stderr)
    assert not unknown, f"add these to kReadElsewhere in src/common/params.cc (or make them parameters): {unknown}"
