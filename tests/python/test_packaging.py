"""The Python package's build backend (python/build_support/arfuse_build.py) and pyproject.toml: the
mode, the CUDA major read from a real nvcc-shaped program, the NCCL wheel requirement and the
version tag each major gets, and the hint a missing NCCL library gets at load time. The full
`pip install ./python` (a CMake build) runs in .ci/run; a pure-Python wheel is built here when
scikit-build-core is installed."""
import importlib.util
import os
import pathlib
import stat
import subprocess
import sys
import textwrap
import zipfile

import pytest

import arfuse
from arfuse import _lib
from conftest import PACKAGE_DIR, find_cc

BACKEND_PATH = PACKAGE_DIR / "build_support" / "arfuse_build.py"


@pytest.fixture
def backend(monkeypatch, tmp_path):
    for var in ("ARFUSE_PURE_PYTHON", "ARFUSE_CUDA_MAJOR", "CUDACXX", "CUDA_HOME", "CUDA_PATH", "NCCL_ROOT",
                "NCCL_HOME"):
        monkeypatch.setenv(var, "")  # recorded, so that what the backend exports is undone after the test
        monkeypatch.delenv(var)
    spec = importlib.util.spec_from_file_location("arfuse_build_under_test", BACKEND_PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # No NCCL outside what a test puts there: no system folders, a checkout without .venv.
    monkeypatch.setattr(mod, "SYSTEM_NCCL_ROOTS", ())
    monkeypatch.setattr(mod, "REPO_ROOT", str(tmp_path / "checkout"))
    return mod


def _fake_nvcc(tmp_path, release):
    """An executable that answers --version as nvcc does."""
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True, exist_ok=True)
    nvcc.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        echo "nvcc: NVIDIA (R) Cuda compiler driver"
        echo "Cuda compilation tools, release {release}, V{release}.88"
        """))
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    return nvcc


def _nccl_files(root):
    (root / "include").mkdir(parents=True, exist_ok=True)
    (root / "include" / "nccl.h").write_text("#define NCCL_MAJOR 2\n")
    (root / "lib").mkdir(exist_ok=True)
    (root / "lib" / "libnccl.so.2").write_bytes(b"")


@pytest.mark.parametrize("release,major", [("13.0", "13"), ("12.8", "12")])
def test_cuda_major_comes_from_nvcc(backend, tmp_path, monkeypatch, release, major):
    nvcc = _fake_nvcc(tmp_path, release)
    monkeypatch.setenv("CUDACXX", str(nvcc))
    assert backend.cuda_major() == major
    assert os.environ["ARFUSE_CUDA_MAJOR"] == major  # what pyproject.toml's overrides key on
    assert backend._nccl_requirement(major) == [f"nvidia-nccl-cu{major}"]  # no NCCL anywhere: the wheel


def test_an_nccl_already_here_is_linked_and_no_wheel_is_fetched_for_the_build(backend, tmp_path, monkeypatch):
    # pip downloads a build requirement into the isolated build environment and the dependency again:
    # with NCCL in the toolkit, the build links that one and asks pip for nothing.
    nvcc = _fake_nvcc(tmp_path, "13.0")
    monkeypatch.setenv("CUDACXX", str(nvcc))
    assert backend._nccl_requirement("13") == ["nvidia-nccl-cu13"]  # nothing here yet
    assert backend._prepare() == "13" and "NCCL_ROOT" not in os.environ
    _nccl_files(tmp_path)  # the toolkit (tmp_path/bin/nvcc) now has include/nccl.h and lib/libnccl.so.2
    assert backend.local_nccl("13") == (str(tmp_path), "the CUDA toolkit")
    assert backend._nccl_requirement("13") == []
    assert backend._prepare() == "13" and os.environ["NCCL_ROOT"] == str(tmp_path)  # what FindNCCL takes first


def test_the_wheel_in_a_venv_is_found_through_its_python(backend, tmp_path, monkeypatch):
    # A venv (the checkout's .venv, as scripts/setup.sh makes it) holding nvidia-nccl-cu13: found by
    # asking its python in isolated mode, so pip's build isolation cannot hide it.
    monkeypatch.setenv("CUDACXX", str(_fake_nvcc(tmp_path, "13.0")))
    venv = tmp_path / "checkout" / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    query = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(venv / "bin" / "python3"), "-I", "-c", query], capture_output=True, text=True,
                          check=True).stdout.strip()
    nccl = os.path.join(site, "nvidia", "nccl")
    _nccl_files(pathlib.Path(nccl))
    dist = os.path.join(site, "nvidia_nccl_cu13-2.28.9.dist-info")
    os.makedirs(dist)
    with open(os.path.join(dist, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: nvidia-nccl-cu13\nVersion: 2.28.9\n")
    assert backend.local_nccl("13") == (nccl, "nvidia-nccl-cu13 in the checkout's .venv")
    assert backend.local_nccl("12") is None  # a cu13 wheel is no NCCL for CUDA 12
    assert backend._nccl_requirement("13") == []


def test_cuda_11_is_refused_by_name(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDACXX", str(_fake_nvcc(tmp_path, "11.8")))
    with pytest.raises(RuntimeError, match=r"CUDA 11\.8; arfuse builds for CUDA 12 or 13"):
        backend.cuda_major()


def test_explicit_major_wins_and_is_checked(backend, monkeypatch):
    monkeypatch.setenv("ARFUSE_CUDA_MAJOR", "12")
    assert backend.cuda_major() == "12"
    monkeypatch.setenv("ARFUSE_CUDA_MAJOR", "14")
    with pytest.raises(RuntimeError, match="ARFUSE_CUDA_MAJOR=14"):
        backend.cuda_major()


def test_no_nvcc_says_how_to_get_a_pure_package(backend, monkeypatch):
    monkeypatch.setattr(backend, "find_nvcc", lambda: None)
    with pytest.raises(RuntimeError) as e:
        backend.cuda_major()
    assert "no nvcc was found" in str(e.value)
    assert "ARFUSE_PURE_PYTHON=1 pip install ./python" in str(e.value)


def test_pure_mode_needs_no_toolkit_and_no_nccl(backend, monkeypatch):
    monkeypatch.setenv("ARFUSE_PURE_PYTHON", "1")
    monkeypatch.setattr(backend, "find_nvcc", lambda: None)
    assert backend._prepare() is None
    assert backend._nccl_requirement(None) == []


def test_sdist_is_refused_with_the_wheel_command(backend, tmp_path):
    with pytest.raises(RuntimeError, match=r"pip wheel \./python"):
        backend.build_sdist(str(tmp_path))


def test_pyproject_overrides_tag_every_major():
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11")
    with open(PACKAGE_DIR / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)
    skb = project["tool"]["scikit-build"]
    assert project["build-system"]["backend-path"] == ["build_support"]
    assert skb["cmake"]["source-dir"] == ".."
    assert skb["cmake"]["define"]["ARFUSE_PYTHON_WHEEL"] == "ON"
    overrides = skb["overrides"]
    for major in ("12", "13"):
        (o,) = [o for o in overrides if o["if"].get("env", {}).get("ARFUSE_CUDA_MAJOR") == f"^{major}$"]
        assert o["metadata"]["version"]["result"] == "{value}+cu" + major
        assert o["metadata"]["dependencies"]["result"] == [f"nvidia-nccl-cu{major}"]
    pure = overrides[-1]  # last, so it wins over a stray ARFUSE_CUDA_MAJOR
    assert pure["if"]["env"] == {"ARFUSE_PURE_PYTHON": True}
    assert pure["wheel"]["cmake"] is False
    assert pure["metadata"]["dependencies"]["result"] == []


def test_pure_wheel_builds_without_cmake(tmp_path):
    pytest.importorskip("scikit_build_core", reason="scikit-build-core not installed (pip install scikit-build-core)")
    env = dict(os.environ, ARFUSE_PURE_PYTHON="1")
    env.pop("ARFUSE_CUDA_MAJOR", None)
    code = ("import sys; sys.path.insert(0, 'build_support'); import arfuse_build; "
            f"print(arfuse_build.build_wheel({str(tmp_path)!r}))")
    r = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE_DIR, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    name = r.stdout.strip().splitlines()[-1]
    assert name == "arfuse-0.1.0-py3-none-any.whl", name
    with zipfile.ZipFile(tmp_path / name) as z:
        names = z.namelist()
        meta = z.read("arfuse-0.1.0.dist-info/METADATA").decode()
    assert "arfuse/_lib.py" in names and not any(n.endswith(".so") for n in names)
    requires = [line for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    assert requires and not any("nvidia-nccl" in line for line in requires), requires


@pytest.mark.parametrize("missing,advice", [
    ("libnccl.so.2: cannot open shared object file: No such file or directory", "pip install nvidia-nccl-cu13"),
    ("libcudart.so.13: cannot open shared object file: No such file or directory", "LD_LIBRARY_PATH"),
])
def test_a_missing_dependency_gets_advice(missing, advice):
    assert advice in _lib._missing_dependency_hint(missing)
    assert _lib._missing_dependency_hint("libfoo.so: cannot open shared object file") == ""


def test_loading_without_nccl_names_the_wheel(tmp_path):
    # A real shared library that needs an NCCL library, loaded after that library is gone (soname .99:
    # no machine has one, so the system loader cannot stand in for it).
    cc = find_cc()
    if cc is None:
        pytest.skip("no C compiler to build the stub libraries")
    fake = tmp_path / "fake"
    fake.mkdir()
    (tmp_path / "nccl.c").write_text("int ncclFake(void) { return 0; }\n")
    (tmp_path / "stub.c").write_text("int ncclFake(void);\nint arfuseStub(void) { return ncclFake(); }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libnccl.so.99", "-o", str(fake / "libnccl.so.99"),
                    str(tmp_path / "nccl.c")], check=True)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "libarfuse.so"), str(tmp_path / "stub.c"),
                    str(fake / "libnccl.so.99")], check=True)
    (fake / "libnccl.so.99").unlink()
    with pytest.raises(arfuse.ArfuseLibraryError) as e:
        _lib.open_library(str(tmp_path / "libarfuse.so"), "a test")
    assert "libnccl.so.99" in str(e.value) and "pip install nvidia-nccl-cu13" in str(e.value), str(e.value)


def test_dir_lists_only_the_package_names():
    """dir(arfuse) is the package's names (__all__ and its subpackages), not what its modules imported
    (os, typing's names, the private modules); each of them is reachable as an attribute."""
    names = dir(arfuse)
    assert names == sorted(set(arfuse.__all__) | {"integrations", "torch"})
    for leaked in ("os", "Dict", "Optional", "_lib", "_types", "importlib"):
        assert leaked not in names
    for name in names:
        if name != "torch":  # importing arfuse.torch imports torch, which this machine may not have
            assert getattr(arfuse, name) is not None, name
