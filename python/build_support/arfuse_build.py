"""PEP 517 build backend of the arfuse Python package: scikit-build-core, told two things it cannot
work out by itself.

1. The mode. By default the wheel builds libarfuse.so from the repository (CMake, run from the
   repository root) and carries it inside the package. ARFUSE_PURE_PYTHON=1 makes a pure-Python
   wheel instead, for a library built elsewhere (found through ARFUSE_LIBRARY_PATH or the loader).
2. The CUDA major, read from the toolkit's nvcc (CUDACXX, PATH, CUDA_HOME, /usr/local/cuda) unless
   ARFUSE_CUDA_MAJOR says it. It selects the NCCL wheel the build links and the package depends on
   (nvidia-nccl-cu13 / -cu12) and the version's local tag (0.1.0+cu13); pyproject.toml's overrides
   key on ARFUSE_CUDA_MAJOR, which this module exports before scikit-build-core reads its settings.
"""
import os
import re
import shutil
import subprocess


PURE_VAR = "ARFUSE_PURE_PYTHON"
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


def _skbuild():
    # Imported on first use, so the mode and CUDA detection above can be tested without it.
    from scikit_build_core import build

    return build


def _prepare():
    """Exports the mode's facts; returns the CUDA major, or None for a pure-Python wheel."""
    return None if pure_python() else cuda_major()


def _nccl_requirement(major):
    # Built against the same wheel the package then depends on, so the library found at run time
    # (RUNPATH $ORIGIN/../nvidia/nccl/lib) is the one compiled against.
    return [] if major is None else [f"nvidia-nccl-cu{major}"]


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
