# Install rules. Two layouts:
#  - a prefix (cmake --install build --prefix X): bin/arfuse, lib/libarfuse.so*, include/arfuse/arfuse.h,
#    lib/cmake/arfuse (find_package(arfuse) -> arfuse::arfuse) and lib/pkgconfig/arfuse.pc;
#  - the Python wheel (ARFUSE_PYTHON_WHEEL): only arfuse/libarfuse.so, beside the package's modules.
# A build without CUDA (top-level ARFUSE_CUDA) installs bin/arfuse only (triage, plan, env).
include(GNUInstallDirs)

if(NOT ARFUSE_WITH_CUDA)
  if(TARGET arfuse_cli)
    install(TARGETS arfuse_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
  return()
endif()

if(ARFUSE_PYTHON_WHEEL)
  # One file, no version symlinks (a wheel stores links as copies); the package loads it by path.
  # NCCL comes from the nvidia-nccl-cu* wheel the package depends on: site-packages/nvidia/nccl/lib,
  # a sibling of site-packages/arfuse. The build environment's own copy is gone after the build, so
  # no absolute path goes into RUNPATH; without the wheel the system loader still gets its turn.
  set_property(TARGET arfuse PROPERTY VERSION)
  set_property(TARGET arfuse PROPERTY SOVERSION)
  set_target_properties(arfuse PROPERTIES INSTALL_RPATH "$ORIGIN/../nvidia/nccl/lib" INSTALL_RPATH_USE_LINK_PATH OFF)
  install(TARGETS arfuse LIBRARY DESTINATION arfuse COMPONENT python)
  return()
endif()

include(CMakePackageConfigHelpers)
# An installed bin/arfuse finds its lib/libarfuse.so.0 wherever the prefix is moved to; NCCL and the
# CUDA runtime keep the folders they were linked from when those are not the system's own.
file(RELATIVE_PATH _arfuse_bin_to_lib "${CMAKE_INSTALL_FULL_BINDIR}" "${CMAKE_INSTALL_FULL_LIBDIR}")
# INSTALL_RPATH_USE_LINK_PATH skips folders inside the source or build tree, which is where a
# `python3 -m venv .venv` holding the NCCL wheel lives: NCCL's and the runtime's folders are named
# explicitly (unless they are the system's own).
set(_arfuse_dep_rpath "")
get_filename_component(_nccl_dir "${NCCL_LIBRARY}" DIRECTORY)
foreach(_d IN ITEMS "${_nccl_dir}" "${CUDAToolkit_LIBRARY_DIR}")
  if(_d AND NOT _d IN_LIST CMAKE_PLATFORM_IMPLICIT_LINK_DIRECTORIES AND NOT _d IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    list(APPEND _arfuse_dep_rpath "${_d}")
  endif()
endforeach()
list(REMOVE_DUPLICATES _arfuse_dep_rpath)
set_target_properties(arfuse PROPERTIES INSTALL_RPATH "${_arfuse_dep_rpath}" INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS arfuse EXPORT arfuseTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/arfuse DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET arfuse_cli)
  set_target_properties(arfuse_cli PROPERTIES INSTALL_RPATH "$ORIGIN/${_arfuse_bin_to_lib};${_arfuse_dep_rpath}"
                                              INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS arfuse_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# CMake package: consumers need neither CUDA nor NCCL to compile against the C header.
install(EXPORT arfuseTargets NAMESPACE arfuse:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/arfuse)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/arfuseConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/arfuseConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/arfuse)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/arfuseConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/arfuseConfig.cmake ${PROJECT_BINARY_DIR}/arfuseConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/arfuse)

# pkg-config: paths relative to the .pc file's folder, so a moved prefix still works (absolute
# CMAKE_INSTALL_*DIR values stay absolute). Libs also carries -Wl,-rpath,${libdir} unless the
# library lands in a folder the loader searches anyway (/usr/lib, ...): a program linked with
# `pkg-config --libs arfuse` then finds libarfuse.so.0 at run time without LD_LIBRARY_PATH, as
# bin/arfuse does (Open MPI's .pc files do the same for prefixes outside the system's). Whether it
# does is decided at install time, when the prefix is known (cmake --install --prefix X).
file(RELATIVE_PATH ARFUSE_PC_TO_PREFIX "/_p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/_p")
string(REGEX REPLACE "/$" "" ARFUSE_PC_TO_PREFIX "${ARFUSE_PC_TO_PREFIX}")
foreach(_d INCLUDEDIR LIBDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_d}}")
    set(ARFUSE_PC_${_d} "${CMAKE_INSTALL_${_d}}")
  else()
    set(ARFUSE_PC_${_d} "\${prefix}/${CMAKE_INSTALL_${_d}}")
  endif()
endforeach()
set(ARFUSE_PC_RPATH "@ARFUSE_PC_RPATH@")  # filled in at install time
configure_file(${PROJECT_SOURCE_DIR}/cmake/arfuse.pc.in ${PROJECT_BINARY_DIR}/arfuse.pc.in @ONLY)
set(_arfuse_system_libdirs ${CMAKE_PLATFORM_IMPLICIT_LINK_DIRECTORIES} ${CMAKE_C_IMPLICIT_LINK_DIRECTORIES} /lib /lib64
                           /usr/lib /usr/lib64)
install(CODE "set(ARFUSE_PC_IN \"${PROJECT_BINARY_DIR}/arfuse.pc.in\")
set(ARFUSE_PC_OUT \"${PROJECT_BINARY_DIR}/arfuse.pc\")
set(ARFUSE_PC_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
set(ARFUSE_SYSTEM_LIBDIRS \"${_arfuse_system_libdirs}\")
include(\"${PROJECT_SOURCE_DIR}/cmake/pc_rpath.cmake\")")
install(FILES ${PROJECT_BINARY_DIR}/arfuse.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
