include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS arfuse EXPORT arfuseTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/arfuse DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET arfuse_cli)
  install(TARGETS arfuse_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT arfuseTargets NAMESPACE arfuse:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/arfuse)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/arfuseConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/arfuseConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/arfuse)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/arfuseConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/arfuseConfig.cmake ${PROJECT_BINARY_DIR}/arfuseConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/arfuse)
