# The optional CUDA component: target dsv32_cuda (alias dsv32::cuda) = the header-only core
# (dsv32::dsv32) + the CUDA runtime and cuBLASLt. Its kernels are templates and inline code in
# include/dsv32/backend/cuda/*.cuh that the user's own .cu translation unit instantiates by including
# <dsv32/cuda.hpp> (docs/cuda.md): there is no compiled dsv32 library, only the link interface.
#
# Included by the top-level CMakeLists.txt after enable_language(CUDA) succeeded.

find_package(CUDAToolkit REQUIRED)
if(CUDAToolkit_VERSION VERSION_LESS 12.9)
  set(_dsv32_msg "dsv32: the CUDA backend needs CUDA >= 12.9 (cuBLASLt's 1x128 / 128x128 FP8 scaling), found ${CUDAToolkit_VERSION}")
  if(DSV32_CUDA STREQUAL "ON")
    message(FATAL_ERROR "${_dsv32_msg}. Configure with -DDSV32_CUDA=OFF to build without it.")
  endif()
  message(STATUS "${_dsv32_msg}: the CUDA target, tests and benchmark are not built")
  return()
endif()

add_library(dsv32_cuda INTERFACE)
add_library(dsv32::cuda ALIAS dsv32_cuda)
set_target_properties(dsv32_cuda PROPERTIES EXPORT_NAME cuda)
target_link_libraries(dsv32_cuda INTERFACE dsv32::dsv32 CUDA::cudart CUDA::cublasLt)
# C++20 in the user's .cu files: a flag rather than the compile feature cuda_std_20, which CMake 3.25
# does not know for nvcc 13
target_compile_options(dsv32_cuda INTERFACE "$<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>")
# nvcc's diagnostics about Eigen's __host__ __device__ annotations (Eigen is included for the CPU
# backend, which the CUDA tests compare against), not about dsv32's code.
target_compile_options(dsv32_cuda INTERFACE
  "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-diag-suppress 20012,20013,20015,554>")

if(DSV32_INSTALL)
  # A separate export set, so the core package does not depend on the CUDA toolkit. dsv32Config.cmake
  # loads it with include(".../dsv32-cuda.cmake" OPTIONAL).
  set(_dsv32_cmake_dir "${CMAKE_INSTALL_LIBDIR}/cmake/dsv32")
  install(TARGETS dsv32_cuda EXPORT dsv32CudaTargets)
  install(EXPORT dsv32CudaTargets FILE dsv32CudaTargets.cmake NAMESPACE dsv32:: DESTINATION "${_dsv32_cmake_dir}")
  install(FILES "${PROJECT_SOURCE_DIR}/cmake/dsv32-cuda.cmake" DESTINATION "${_dsv32_cmake_dir}")
  unset(_dsv32_cmake_dir)
endif()
