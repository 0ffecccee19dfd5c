# The optional NCCL component: target dsv32_nccl (alias dsv32::nccl) = the CUDA backend's link
# interface (dsv32::cuda) + NCCL (NCCL::nccl, cmake/FindNCCL.cmake), for <dsv32/nccl.hpp>
# (NcclCommunicator: device-memory collectives on the CUDA backend's stream). Bootstrapping a group of
# processes over MPI (<dsv32/parallel/nccl_mpi_bootstrap.hpp>) needs dsv32::mpi as well; a single process needs
# no MPI. Where NCCL is not found the component is left out, with a message.
#
# Included by the top-level CMakeLists.txt after cmake/cuda.cmake defined dsv32::cuda, when
# DSV32_BUILD_NCCL is ON.

find_package(NCCL 2.13)  # cmake/FindNCCL.cmake; 2.13: ncclGetLastError (bf16 and send/recv are older)
if(NOT NCCL_FOUND)
  message(STATUS "dsv32: NCCL not found (it ships with CUDA 13 under the toolkit; or set NCCL_ROOT): "
                 "the dsv32::nccl component and its tests are left out")
  return()
endif()
message(STATUS "dsv32: NCCL ${NCCL_VERSION}: the dsv32::nccl component is built (${NCCL_LIBRARY})")

add_library(dsv32_nccl INTERFACE)
add_library(dsv32::nccl ALIAS dsv32_nccl)
set_target_properties(dsv32_nccl PROPERTIES EXPORT_NAME nccl)
target_link_libraries(dsv32_nccl INTERFACE dsv32::cuda NCCL::nccl)

if(DSV32_INSTALL)
  # A separate export set, loaded by dsv32Config.cmake with include(".../dsv32-nccl.cmake" OPTIONAL)
  # after dsv32-cuda.cmake: a consumer without NCCL still gets the rest of the package.
  set(_dsv32_cmake_dir "${CMAKE_INSTALL_LIBDIR}/cmake/dsv32")
  install(TARGETS dsv32_nccl EXPORT dsv32NcclTargets)
  install(EXPORT dsv32NcclTargets FILE dsv32NcclTargets.cmake NAMESPACE dsv32:: DESTINATION "${_dsv32_cmake_dir}")
  install(FILES "${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake" "${PROJECT_SOURCE_DIR}/cmake/dsv32-nccl.cmake"
          DESTINATION "${_dsv32_cmake_dir}")
  unset(_dsv32_cmake_dir)
endif()
