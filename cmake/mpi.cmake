# The optional MPI component: target dsv32_mpi (alias dsv32::mpi) = the header-only core (dsv32::dsv32)
# + MPI's C API (MPI::MPI_CXX, which links the C library), for <dsv32/mpi.hpp> (MpiCommunicator).
# The core target does not depend on MPI. Where MPI is not found the component is left out, with a
# message, and the tests that need it report themselves skipped.
#
# Included by the top-level CMakeLists.txt when DSV32_BUILD_MPI is ON.

find_package(MPI COMPONENTS CXX)
if(NOT MPI_CXX_FOUND)
  message(STATUS "dsv32: MPI not found (Debian/Ubuntu: apt-get install libopenmpi-dev openmpi-bin): "
                 "the dsv32::mpi component, the MPI tests and dsv32-bench-mpi are left out")
  return()
endif()

add_library(dsv32_mpi INTERFACE)
add_library(dsv32::mpi ALIAS dsv32_mpi)
set_target_properties(dsv32_mpi PROPERTIES EXPORT_NAME mpi)
target_link_libraries(dsv32_mpi INTERFACE dsv32::dsv32 MPI::MPI_CXX)

if(DSV32_INSTALL)
  # A separate export set, so the core package does not depend on MPI. dsv32Config.cmake loads it with:
  # include("${CMAKE_CURRENT_LIST_DIR}/dsv32-mpi.cmake" OPTIONAL)
  set(_dsv32_cmake_dir "${CMAKE_INSTALL_LIBDIR}/cmake/dsv32")
  install(TARGETS dsv32_mpi EXPORT dsv32MpiTargets)
  install(EXPORT dsv32MpiTargets FILE dsv32MpiTargets.cmake NAMESPACE dsv32:: DESTINATION "${_dsv32_cmake_dir}")
  install(FILES "${PROJECT_SOURCE_DIR}/cmake/dsv32-mpi.cmake" DESTINATION "${_dsv32_cmake_dir}")
  unset(_dsv32_cmake_dir)
endif()
