# Which CUDA architectures to build, decided before enable_language(CUDA) (CMake's own default list
# is turned off). Sets ARFUSE_ARCH_LIST (e.g. "90" or "80;86;89;90;100f;120f") and prints one line
# saying what was chosen and why.
#
#   -DARFUSE_ARCH=          (the default) the GPUs of this machine, by their compute capability
#                           (nvidia-smi); every architecture when no GPU answers
#   -DARFUSE_ARCH=all       every architecture arfuse supports (CI and the Python wheel)
#   -DARFUSE_ARCH=90;100f   exactly these (CMAKE_CUDA_ARCHITECTURES is honoured the same way)
#
# Blackwell is built for its families (100f: B200/GB200/B300, 120f: RTX PRO 6000/RTX 50xx): that is
# what exposes the FP4 conversion instruction (cvt ... e2m1x2) used by the NVFP4 epilogue. CMake
# before 3.31 does not know family targets, so every architecture goes to nvcc as an explicit
# --generate-code (arfuse_cuda_flags below) and CMake's own list is turned off.
set(ARFUSE_ALL_ARCHS "80;86;89;90;100f;120f")
set(ARFUSE_ARCH "" CACHE STRING
    "CUDA architectures: empty = this machine's GPUs (all when none), 'all', or a list such as 90;100f")

# The architecture that builds native code for a GPU of compute capability MAJOR.MINOR: from
# Blackwell on the family target (10.3 runs 100f code), before it the exact one. Empty below sm_80.
function(_arfuse_arch_of_cc cc out)
  set(${out} "" PARENT_SCOPE)
  if(NOT cc MATCHES "^([0-9]+)\\.([0-9]+)$")
    return()
  endif()
  set(_major ${CMAKE_MATCH_1})
  set(_minor ${CMAKE_MATCH_2})
  if(_major LESS 8)
    return()
  elseif(_major GREATER_EQUAL 10)
    set(${out} "${_major}0f" PARENT_SCOPE)
  else()
    set(${out} "${_major}${_minor}" PARENT_SCOPE)
  endif()
endfunction()

# This machine's GPUs: ARFUSE_DETECTED_ARCHS (sorted, unique; empty when none answered),
# ARFUSE_DETECTED_WHAT (their names, or why none was found).
function(_arfuse_detect_gpus)
  set(ARFUSE_DETECTED_ARCHS "" PARENT_SCOPE)
  find_program(_arfuse_nvidia_smi nvidia-smi NO_CACHE)
  if(NOT _arfuse_nvidia_smi)
    set(ARFUSE_DETECTED_WHAT "no nvidia-smi on PATH" PARENT_SCOPE)
    return()
  endif()
  execute_process(COMMAND "${_arfuse_nvidia_smi}" --query-gpu=compute_cap,name --format=csv,noheader
                  OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc TIMEOUT 30
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rc EQUAL 0 OR _out STREQUAL "")
    string(STRIP "${_err}${_out}" _why)
    string(REGEX REPLACE "\n.*" "" _why "${_why}")
    set(ARFUSE_DETECTED_WHAT "nvidia-smi found no GPU: ${_why}" PARENT_SCOPE)
    return()
  endif()
  string(REPLACE "\n" ";" _lines "${_out}")
  set(_archs "")
  set(_names "")
  set(_old "")
  foreach(_line IN LISTS _lines)
    if(_line MATCHES "^ *([0-9]+\\.[0-9]+) *, *(.*)$")
      set(_cc "${CMAKE_MATCH_1}")
      set(_name "${CMAKE_MATCH_2}")
      _arfuse_arch_of_cc("${_cc}" _a)
      if(_a STREQUAL "")
        list(APPEND _old "${_name} (${_cc})")
      else()
        list(APPEND _archs "${_a}")
        list(APPEND _names "${_name}")
      endif()
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _archs)
  list(SORT _archs COMPARE NATURAL)
  list(LENGTH _names _n)
  list(REMOVE_DUPLICATES _names)
  string(JOIN ", " _what ${_names})
  if(_n GREATER 1)
    set(_what "${_n} GPUs: ${_what}")
  endif()
  if(_old)
    string(JOIN ", " _oldtext ${_old})
    if(_what STREQUAL "")
      set(_what "only GPUs older than arfuse supports (sm_80): ${_oldtext}")
    else()
      set(_what "${_what}; left out, older than sm_80: ${_oldtext}")
    endif()
  endif()
  set(ARFUSE_DETECTED_ARCHS "${_archs}" PARENT_SCOPE)
  set(ARFUSE_DETECTED_WHAT "${_what}" PARENT_SCOPE)
endfunction()

string(REPLACE ";" " " _arfuse_all_text "${ARFUSE_ALL_ARCHS}")
if(ARFUSE_ARCH STREQUAL "all")
  set(ARFUSE_ARCH_LIST "${ARFUSE_ALL_ARCHS}")
  set(_arfuse_arch_why "every architecture (-DARFUSE_ARCH=all)")
elseif(NOT ARFUSE_ARCH STREQUAL "")
  set(ARFUSE_ARCH_LIST "${ARFUSE_ARCH}")
  set(_arfuse_arch_why "-DARFUSE_ARCH=${ARFUSE_ARCH}")
elseif(DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT CMAKE_CUDA_ARCHITECTURES MATCHES "^(OFF|native|)$")
  set(ARFUSE_ARCH_LIST "${CMAKE_CUDA_ARCHITECTURES}")
  set(_arfuse_arch_why "-DCMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES}")
else()
  _arfuse_detect_gpus()
  if(ARFUSE_DETECTED_ARCHS)
    set(ARFUSE_ARCH_LIST "${ARFUSE_DETECTED_ARCHS}")
    set(_arfuse_arch_why "this machine's GPUs (${ARFUSE_DETECTED_WHAT}); -DARFUSE_ARCH=all builds every architecture")
  else()
    set(ARFUSE_ARCH_LIST "${ARFUSE_ALL_ARCHS}")
    set(_arfuse_arch_why "every architecture: ${ARFUSE_DETECTED_WHAT}; -DARFUSE_ARCH=90 builds one")
  endif()
endif()
foreach(_a IN LISTS ARFUSE_ARCH_LIST)
  if(NOT _a MATCHES "^[0-9]+[af]?(-real|-virtual)?$")
    message(FATAL_ERROR "ARFUSE_ARCH / CMAKE_CUDA_ARCHITECTURES: '${_a}' is not a CUDA architecture; give numbers "
                        "such as 90 or 100f separated by ';', or all (every one arfuse supports: ${_arfuse_all_text})")
  endif()
endforeach()
set(ARFUSE_ARCH_LIST "${ARFUSE_ARCH_LIST}" CACHE INTERNAL "the CUDA architectures arfuse is built for")
set(CMAKE_CUDA_ARCHITECTURES OFF)
string(REPLACE ";" " sm_" _arfuse_arch_text "sm_${ARFUSE_ARCH_LIST}")
set(ARFUSE_ARCH_MESSAGE "arfuse: CUDA code for ${_arfuse_arch_text}: ${_arfuse_arch_why}")

# --generate-code per architecture: machine code plus PTX for a plain target, machine code only for
# a family or chip target (100f, 120a). With several architectures, nvcc compiles them in parallel
# (--threads, one per architecture): the largest translation unit (hoststaged's launch.cu) compiled
# six architectures one after the other and was the whole build's critical path on 2 cores (1669 s
# of a 1813 s build). The output is the same; only the order of the work changes.
function(arfuse_cuda_flags out)
  set(_flags "")
  list(LENGTH ARFUSE_ARCH_LIST _n)
  if(_n GREATER 1)
    set(_flags " --threads=${_n}")
  endif()
  foreach(_a IN LISTS ARFUSE_ARCH_LIST)
    string(REGEX REPLACE "-(real|virtual)$" "" _a "${_a}")
    if(_a MATCHES "^[0-9]+$")
      string(APPEND _flags " --generate-code=arch=compute_${_a},code=[compute_${_a},sm_${_a}]")
    else()
      string(APPEND _flags " --generate-code=arch=compute_${_a},code=sm_${_a}")
    endif()
  endforeach()
  set(${out} "${_flags}" PARENT_SCOPE)
endfunction()
