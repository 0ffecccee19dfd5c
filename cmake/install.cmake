# Install rules and the package config: find_package(dsv32) then target_link_libraries(... dsv32::dsv32).
include(CMakePackageConfigHelpers)
set(DSV32_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/dsv32")

install(TARGETS dsv32 EXPORT dsv32Targets)
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.cuh")
install(EXPORT dsv32Targets FILE dsv32Targets.cmake NAMESPACE dsv32:: DESTINATION "${DSV32_CMAKE_DIR}")

configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/dsv32Config.cmake.in"
                              "${PROJECT_BINARY_DIR}/dsv32Config.cmake"
                              INSTALL_DESTINATION "${DSV32_CMAKE_DIR}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/dsv32ConfigVersion.cmake"
                                 COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES "${PROJECT_BINARY_DIR}/dsv32Config.cmake" "${PROJECT_BINARY_DIR}/dsv32ConfigVersion.cmake"
        DESTINATION "${DSV32_CMAKE_DIR}")
