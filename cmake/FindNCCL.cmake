# Finds NCCL headers and library. Hints: NCCL_ROOT / NCCL_HOME (env or cache), the CUDA toolkit,
# and the nvidia-nccl-cu* Python wheel that PyTorch ships (nvidia/nccl/{include,lib}).
set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda /usr)
if(NOT NCCL_ROOT AND NOT DEFINED ENV{NCCL_ROOT})
  find_program(_nccl_py NAMES python3 python)
  if(_nccl_py)
    execute_process(COMMAND ${_nccl_py} -c "import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])"
                    OUTPUT_VARIABLE _nccl_pydir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_nccl_pydir)
      list(APPEND _nccl_hints ${_nccl_pydir})
    endif()
  endif()
endif()
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_nccl_hints} PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_INCLUDE_DIR NCCL_LIBRARY)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
