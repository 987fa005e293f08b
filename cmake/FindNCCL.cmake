# FindNCCL: NCCL's header and library as the imported target NCCL::nccl, plus NCCL_VERSION and
# NCCL_FOUND_IN (what supplied it: "NCCL_ROOT", "the nvidia-nccl-cu13 wheel", "the CUDA toolkit",
# "the system").
#
# NVIDIA's CUDA toolkit does not ship NCCL and Debian has no libnccl-dev, so on a fresh machine the
# easiest source is NVIDIA's wheel (`pip install nvidia-nccl-cu13`, or -cu12 for CUDA 12; PyTorch
# installs it too). It holds nvidia/nccl/include/nccl.h and nvidia/nccl/lib/libnccl.so.2. Where it
# looks, the first complete hit (header and library from one place) winning:
#   1. NCCL_ROOT (CMake variable or environment) or NCCL_HOME (the Python package's build backend sets
#      it to an NCCL already on the machine, so pip need not download the wheel for the build too);
#   2. the wheel, when building the Python package (ARFUSE_PYTHON_WHEEL) in a build environment that
#      holds it (no NCCL was on the machine: python/build_support/arfuse_build.py);
#   3. the CUDA toolkit's folders, then the system's (/usr, /usr/local; libnccl-dev from NVIDIA's repo);
#   4. the wheel in the Python environment of Python3_EXECUTABLE / Python_EXECUTABLE / python3.
# NCCL_INCLUDE_DIR and NCCL_LIBRARY given on the command line are taken as they are.

set(_nccl_major_hint 13)
if(CUDAToolkit_VERSION_MAJOR)
  set(_nccl_major_hint ${CUDAToolkit_VERSION_MAJOR})
endif()

# The nvidia/nccl folders of every Python that can answer, with the wheel's distribution name.
set(_nccl_wheel_dirs "")
set(_nccl_wheel_dists "")
set(_nccl_pythons "")
foreach(_py IN ITEMS "${Python3_EXECUTABLE}" "${Python_EXECUTABLE}")
  if(_py)
    list(APPEND _nccl_pythons "${_py}")
  endif()
endforeach()
# Not cached: the python3 on PATH at this configure (a venv activated since the last one) is asked.
find_program(_nccl_path_python NAMES python3 python NO_CACHE)
if(_nccl_path_python)
  list(APPEND _nccl_pythons "${_nccl_path_python}")
endif()
list(REMOVE_DUPLICATES _nccl_pythons)
set(_nccl_query [=[
import importlib.util, sys
try:
    spec = importlib.util.find_spec("nvidia.nccl")
except ImportError:
    spec = None
if spec is None or not spec.submodule_search_locations:
    sys.exit(0)
folder = list(spec.submodule_search_locations)[0]
dist = "nvidia-nccl"
try:
    import importlib.metadata as md
    for d in md.distributions():
        name = (d.metadata["Name"] or "").lower()
        if name.startswith("nvidia-nccl-cu"):
            dist = name + " " + d.version
            break
except Exception:
    pass
print(folder + "|" + dist)
]=])
foreach(_py IN LISTS _nccl_pythons)
  execute_process(COMMAND "${_py}" -c "${_nccl_query}" OUTPUT_VARIABLE _out OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND _out MATCHES "^([^|]+)\\|(.*)$")
    list(APPEND _nccl_wheel_dirs "${CMAKE_MATCH_1}")
    list(APPEND _nccl_wheel_dists "${CMAKE_MATCH_2}")
  endif()
endforeach()

set(_nccl_explicit ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME})
set(_nccl_toolkit "")
foreach(_d IN ITEMS "${CUDAToolkit_LIBRARY_ROOT}" "${CUDAToolkit_TARGET_DIR}")
  if(_d)
    list(APPEND _nccl_toolkit "${_d}")
  endif()
endforeach()

# One candidate source: header and library from the same roots, or neither.
macro(_nccl_try label)
  if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
    find_path(NCCL_INCLUDE_DIR nccl.h PATHS ${ARGN} PATH_SUFFIXES include NO_DEFAULT_PATH)
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 PATHS ${ARGN} PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu
                 NO_DEFAULT_PATH)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(NCCL_FOUND_IN "${label}" CACHE INTERNAL "what supplied NCCL")
    else()
      unset(NCCL_INCLUDE_DIR CACHE)
      unset(NCCL_LIBRARY CACHE)
    endif()
  endif()
endmacro()

if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
  unset(NCCL_FOUND_IN CACHE)
elseif(NOT NCCL_FOUND_IN)
  set(NCCL_FOUND_IN "NCCL_INCLUDE_DIR / NCCL_LIBRARY" CACHE INTERNAL "what supplied NCCL")
endif()
if(_nccl_explicit)
  _nccl_try("NCCL_ROOT" ${_nccl_explicit})
endif()
list(LENGTH _nccl_wheel_dirs _nccl_nwheels)
if(_nccl_nwheels GREATER 0)
  list(GET _nccl_wheel_dists 0 _nccl_wheel_dist)
  if(ARFUSE_PYTHON_WHEEL)
    _nccl_try("the ${_nccl_wheel_dist} wheel" ${_nccl_wheel_dirs})
  endif()
endif()
if(_nccl_toolkit)
  _nccl_try("the CUDA toolkit" ${_nccl_toolkit})
endif()
if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
  find_path(NCCL_INCLUDE_DIR nccl.h)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(NCCL_FOUND_IN "the system" CACHE INTERNAL "what supplied NCCL")
  else()
    unset(NCCL_INCLUDE_DIR CACHE)
    unset(NCCL_LIBRARY CACHE)
  endif()
endif()
if(_nccl_nwheels GREATER 0)
  _nccl_try("the ${_nccl_wheel_dist} wheel" ${_nccl_wheel_dirs})
endif()

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_defs REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${_part} +([0-9]+)" _m "${_nccl_defs}")
    set(_nccl_${_part} "${CMAKE_MATCH_1}")
  endforeach()
  if(NOT _nccl_MAJOR STREQUAL "")
    set(NCCL_VERSION "${_nccl_MAJOR}.${_nccl_MINOR}.${_nccl_PATCH}")
  endif()
endif()

set(_nccl_looked ${_nccl_explicit} ${_nccl_wheel_dirs} ${_nccl_toolkit})
list(REMOVE_DUPLICATES _nccl_looked)
string(JOIN ", " _nccl_looked ${_nccl_looked} "the system's default folders")
if(NOT _nccl_pythons)
  set(_nccl_asked "no python3 found to ask for the wheel")
else()
  string(JOIN ", " _nccl_asked ${_nccl_pythons})
  set(_nccl_asked "asked ${_nccl_asked} for the wheel")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION
  REASON_FAILURE_MESSAGE
  "NCCL (nccl.h and libnccl.so) is needed and the CUDA toolkit does not ship it. Get it one of these ways, then \
configure again:\n\
    python3 -m pip install nvidia-nccl-cu${_nccl_major_hint}     (NVIDIA's wheel, found in the environment of the \
python3 on PATH: in a venv, activate it before cmake)\n\
    apt-get install libnccl-dev          (from NVIDIA's CUDA apt repository, not Debian's)\n\
    -DNCCL_ROOT=/path/to/nccl            (a folder holding include/nccl.h and lib/libnccl.so*)\n\
  Looked in: ${_nccl_looked} (${_nccl_asked}).")

if(NCCL_FOUND)
  if(NCCL_FOUND_IN MATCHES "nvidia-nccl-cu([0-9]+)" AND CUDAToolkit_VERSION_MAJOR
     AND NOT CMAKE_MATCH_1 STREQUAL CUDAToolkit_VERSION_MAJOR)
    message(WARNING "NCCL comes from ${NCCL_FOUND_IN}, built for CUDA ${CMAKE_MATCH_1}, but the CUDA toolkit is "
                    "${CUDAToolkit_VERSION}: install nvidia-nccl-cu${CUDAToolkit_VERSION_MAJOR} instead")
  endif()
  if(NOT NCCL_FIND_QUIETLY)
    message(STATUS "NCCL ${NCCL_VERSION} from ${NCCL_FOUND_IN}: ${NCCL_LIBRARY}")
  endif()
  if(NOT TARGET NCCL::nccl)
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    # -I, not -isystem: searched before the CUDA toolkit's include folder, which may hold an nccl.h of
    # another version than the library found here (a header and a library from two NCCLs).
    set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}" IMPORTED_NO_SYSTEM ON)
  endif()
endif()
