# Installed next to dsv32Config.cmake; loaded by it (after dsv32-cuda.cmake) when present. Defines
# dsv32::nccl (the NCCL component: dsv32::cuda + NCCL::nccl) when dsv32::cuda was defined and NCCL is
# found (FindNCCL.cmake, installed beside this file; NCCL_ROOT points it elsewhere); a consumer without
# the CUDA toolkit or NCCL still gets the rest of the package.
if(TARGET dsv32::cuda)
  list(PREPEND CMAKE_MODULE_PATH "${CMAKE_CURRENT_LIST_DIR}")  # for FindNCCL.cmake
  find_package(NCCL 2.13 QUIET)
  list(POP_FRONT CMAKE_MODULE_PATH)
  if(NCCL_FOUND)
    include("${CMAKE_CURRENT_LIST_DIR}/dsv32NcclTargets.cmake")
  endif()
endif()
