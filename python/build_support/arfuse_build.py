"""PEP 517 build backend of the arfuse Python package: scikit-build-core, told two things it cannot
work out by itself.

1. The mode. By default the wheel builds libarfuse.so from the repository (CMake, run from the
   repository root) and carries it inside the package. ARFUSE_PURE_PYTHON=1 makes a pure-Python
   wheel instead, for a library built elsewhere (found through ARFUSE_LIBRARY_PATH or the loader).
2. The CUDA major, read from the toolkit's nvcc (CUDACXX, PATH, CUDA_HOME, /usr/local/cuda) unless
   ARFUSE_CUDA_MAJOR says it. It selects the NCCL wheel the package depends on (nvidia-nccl-cu13 /
   -cu12) and the version's local tag (0.1.0+cu13); pyproject.toml's overrides key on
   ARFUSE_CUDA_MAJOR, which this module exports before scikit-build-core reads its settings.
3. Which NCCL the build links. The package depends on NVIDIA's NCCL wheel (305 MB for cu13); asking
   for it as a build requirement too made pip download it twice, once into the isolated build
   environment and once as the dependency. So the build links an NCCL already on this machine when
   there is one, exporting NCCL_ROOT for CMake's FindNCCL: NCCL_ROOT / NCCL_HOME as given, the wheel
   in the environment being installed into (built against exactly the library it will load), the
   checkout's .venv (scripts/setup.sh), the toolkit's, the system's. Only with none of them is the
   wheel a build requirement. NCCL 2.x keeps its ABI, and the package's RUNPATH
   ($ORIGIN/../nvidia/nccl/lib) loads the dependency wheel's library at run time either way.
"""
import os
import re
import shutil
import subprocess
import sys


PURE_VAR = "ARFUSE_PURE_PYTHON"
# python/build_support/ -> the repository root (scikit-build-core's cmake.source-dir = "..").
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAJOR_VAR = "ARFUSE_CUDA_MAJOR"
SUPPORTED_MAJORS = ("12", "13")


def _truthy(value):
    return value.strip().lower() in ("1", "true", "yes", "on")


def pure_python():
    return _truthy(os.environ.get(PURE_VAR, ""))


def find_nvcc():
    """The nvcc CMake will use: CUDACXX first (CMake's own variable), then PATH, CUDA_HOME/CUDA_PATH
    and /usr/local/cuda."""
    candidates = [os.environ.get("CUDACXX"), shutil.which("nvcc")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "bin", "nvcc"))
    candidates.append("/usr/local/cuda/bin/nvcc")
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def cuda_major():
    """The CUDA major as a string, exporting ARFUSE_CUDA_MAJOR (and CUDACXX, so CMake compiles with the
    nvcc that was asked). Raises with what to do when there is no usable toolkit."""
    given = os.environ.get(MAJOR_VAR, "").strip()
    if given:
        if given not in SUPPORTED_MAJORS:
            raise RuntimeError(f"{MAJOR_VAR}={given}: arfuse builds for CUDA {' or '.join(SUPPORTED_MAJORS)}")
        return given
    nvcc = find_nvcc()
    if nvcc is None:
        raise RuntimeError(
            "arfuse: building libarfuse.so needs the CUDA toolkit (12.8 or later) and no nvcc was found "
            "(looked at CUDACXX, PATH, CUDA_HOME, CUDA_PATH, /usr/local/cuda/bin). Put nvcc on PATH, or, "
            f"for a library built elsewhere, install the pure-Python package: {PURE_VAR}=1 pip install ./python")
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"release (\d+)\.(\d+)", out)
    if not m:
        raise RuntimeError(f"arfuse: cannot read the CUDA version from `{nvcc} --version`: {out.strip()!r}")
    major = m.group(1)
    if major not in SUPPORTED_MAJORS:
        raise RuntimeError(f"arfuse: {nvcc} is CUDA {m.group(1)}.{m.group(2)}; arfuse builds for CUDA "
                           f"{' or '.join(SUPPORTED_MAJORS)} (12.8 or later)")
    os.environ[MAJOR_VAR] = major
    os.environ.setdefault("CUDACXX", nvcc)
    return major


# Asked of a Python: where its nvidia-nccl-cu<major> wheel is, if it has one with header and library.
_NCCL_WHEEL_QUERY = r"""
import importlib.metadata as md, importlib.util, os, sys
try:
    md.version("nvidia-nccl-cu" + sys.argv[1])
    spec = importlib.util.find_spec("nvidia.nccl")
except Exception:
    sys.exit(1)
for d in (spec.submodule_search_locations or []) if spec else []:
    if os.path.isfile(os.path.join(d, "include", "nccl.h")) and os.path.isfile(os.path.join(d, "lib", "libnccl.so.2")):
        print(d)
        sys.exit(0)
sys.exit(1)
"""

# Folders that may hold include/nccl.h and lib*/libnccl.so* outside any Python environment.
SYSTEM_NCCL_ROOTS = ("/usr", "/usr/local")


def _has_nccl(root):
    if not os.path.isfile(os.path.join(root, "include", "nccl.h")):
        return False
    for lib in ("lib", "lib64", os.path.join("lib", "x86_64-linux-gnu"), os.path.join("lib", "aarch64-linux-gnu")):
        d = os.path.join(root, lib)
        if os.path.isdir(d) and any(f.startswith("libnccl.so") for f in os.listdir(d)):
            return True
    return False


def _wheel_nccl(python, major):
    """The nvidia/nccl folder of `python`'s NCCL wheel for `major`, or None. -I: pip's build isolation
    hides the target environment from this process through PYTHONPATH, which -I ignores."""
    if not python or not os.access(python, os.X_OK):
        return None
    r = subprocess.run([python, "-I", "-c", _NCCL_WHEEL_QUERY, major], capture_output=True, text=True, check=False)
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def local_nccl(major):
    """(root, what) of an NCCL the build can link without downloading one, or None."""
    for var in ("NCCL_ROOT", "NCCL_HOME"):
        if os.environ.get(var):
            return os.environ[var], var
    for python, what in ((sys.executable, "the environment being installed into"),
                         (os.path.join(REPO_ROOT, ".venv", "bin", "python3"), "the checkout's .venv")):
        d = _wheel_nccl(python, major)
        if d:
            return d, f"nvidia-nccl-cu{major} in {what}"
    nvcc = find_nvcc()
    # The folder as CMake names it (no realpath: /usr/local/cuda, not /usr/local/cuda-13.0), so the
    # wheel's compile lines are the plain build's and a compiler cache can serve them.
    toolkit = os.path.dirname(os.path.dirname(nvcc)) if nvcc else None
    if toolkit and _has_nccl(toolkit):
        return toolkit, "the CUDA toolkit"
    for root in SYSTEM_NCCL_ROOTS:
        if _has_nccl(root):
            return root, "the system"
    return None


def _skbuild():
    # Imported on first use, so the mode and CUDA detection above can be tested without it.
    from scikit_build_core import build

    return build


def _prepare():
    """Exports the mode's facts (ARFUSE_CUDA_MAJOR; NCCL_ROOT when an NCCL is here already); returns
    the CUDA major, or None for a pure-Python wheel. Every hook runs in a fresh process, so each
    calls it."""
    if pure_python():
        return None
    major = cuda_major()
    found = local_nccl(major)
    if found and not os.environ.get("NCCL_ROOT"):
        os.environ["NCCL_ROOT"] = found[0]
    return major


def _nccl_requirement(major):
    # Only when no NCCL is here to link: then the build environment gets the wheel (and pip fetches
    # it again as the dependency; 3. above).
    return [] if major is None or local_nccl(major) else [f"nvidia-nccl-cu{major}"]


def get_requires_for_build_wheel(config_settings=None):
    major = _prepare()
    return list(_skbuild().get_requires_for_build_wheel(config_settings)) + _nccl_requirement(major)


def get_requires_for_build_editable(config_settings=None):
    major = _prepare()
    return list(_skbuild().get_requires_for_build_editable(config_settings)) + _nccl_requirement(major)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _prepare()
    return _skbuild().prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    _prepare()
    return _skbuild().prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _prepare()
    return _skbuild().build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _prepare()
    return _skbuild().build_editable(wheel_directory, config_settings, metadata_directory)


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_sdist(sdist_directory, config_settings=None):
    raise RuntimeError(
        "arfuse: the Python package builds libarfuse.so from the whole repository (cmake.source-dir = ..), "
        "which an sdist of python/ cannot hold. Build a wheel instead: pip wheel ./python, or "
        "python -m build --wheel ./python")
