# Installed next to dsv32Config.cmake; loaded by it when present. Defines dsv32::cuda (the CUDA
# backend's link interface: CUDA::cudart and CUDA::cublasLt) when the CUDA toolkit is found; a
# consumer without the toolkit still gets dsv32::dsv32.
find_package(CUDAToolkit 12.9 QUIET)
if(CUDAToolkit_FOUND)
  include("${CMAKE_CURRENT_LIST_DIR}/dsv32CudaTargets.cmake")
endif()
