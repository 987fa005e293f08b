# Run by `cmake --install` (install.cmake's install(CODE)): writes ARFUSE_PC_OUT from ARFUSE_PC_IN with
# ARFUSE_PC_RPATH = " -Wl,-rpath,${libdir}" unless the prefix's library folder is one the loader
# searches anyway (ARFUSE_SYSTEM_LIBDIRS), where an rpath would only get in a packager's way.
set(_libdir "${ARFUSE_PC_LIBDIR}")
if(NOT IS_ABSOLUTE "${_libdir}")
  set(_libdir "${CMAKE_INSTALL_PREFIX}/${_libdir}")
endif()
get_filename_component(_libdir "${_libdir}" ABSOLUTE)
set(ARFUSE_PC_RPATH " -Wl,-rpath,\${libdir}")
foreach(_d IN LISTS ARFUSE_SYSTEM_LIBDIRS)
  get_filename_component(_d "${_d}" ABSOLUTE)
  if(_d STREQUAL _libdir)
    set(ARFUSE_PC_RPATH "")
  endif()
endforeach()
configure_file("${ARFUSE_PC_IN}" "${ARFUSE_PC_OUT}" @ONLY)
