# The CUDA backend's suite: one nvcc translation unit (tests/cuda/test_cuda.cu) with the shared doctest
# main, built where CMake found the CUDA toolkit (target dsv32::cuda). Two ctest entries:
# - dsv32_cuda_host_tests: the cases that need no device ("CUDA host: ..."), without a skip
#   expression, so that a failing host-side check fails there whether a device exists or not;
# - dsv32_cuda_tests: every other case; without a device each prints "SKIPPED: no CUDA device" and
#   ctest reports the entry as skipped, not passed (none of those cases checks anything then).
# Included by tests/CMakeLists.txt.
if(NOT TARGET dsv32_cuda)
  return()
endif()

add_executable(dsv32_cuda_tests "${CMAKE_CURRENT_LIST_DIR}/test_cuda.cu" $<TARGET_OBJECTS:dsv32_test_main>)
target_link_libraries(dsv32_cuda_tests PRIVATE dsv32::cuda dsv32::cpu_kernels doctest::doctest)
target_include_directories(dsv32_cuda_tests PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}")
target_compile_definitions(dsv32_cuda_tests PRIVATE DSV32_TEST_DATA="${DSV32_TEST_DATA}")
add_test(NAME dsv32_cuda_host_tests COMMAND dsv32_cuda_tests "--test-case=CUDA host:*")
add_test(NAME dsv32_cuda_tests COMMAND dsv32_cuda_tests "--test-case-exclude=CUDA host:*")
set_tests_properties(dsv32_cuda_tests PROPERTIES SKIP_REGULAR_EXPRESSION "SKIPPED: no CUDA device")

# The NCCL component's tests, where dsv32::nccl exists (cmake/nccl.cmake):
#  - dsv32_nccl_tests (test_nccl.cu): NcclCommunicator at world size 1 on a device, no MPI needed;
#    without a device it prints "SKIPPED: no CUDA device" and ctest reports it skipped;
#  - dsv32_nccl_host_tests (test_nccl_host.cpp, host compiler, no GPU): DSV32_NCCL_CHECK's messages,
#    NcclBootstrap, unique ids;
#  - dsv32_nccl_mpi_bootstrap[_failure] (test_nccl_mpi.cpp under `mpirun -n 2`, where MPI is found, no
#    GPU): the unique id broadcast over MPI, and the root's failure reaching every rank.
if(NOT TARGET dsv32_nccl)
  add_test(NAME dsv32_nccl_tests COMMAND sh -c "echo 'dsv32_nccl_tests: SKIPPED: NCCL was not found next to the CUDA toolkit (set NCCL_ROOT), so nothing ran on NCCL' >&2; exit 77")
  set_tests_properties(dsv32_nccl_tests PROPERTIES SKIP_RETURN_CODE 77 SKIP_REGULAR_EXPRESSION "SKIPPED: ")
  return()
endif()

add_executable(dsv32_nccl_tests "${CMAKE_CURRENT_LIST_DIR}/test_nccl.cu" $<TARGET_OBJECTS:dsv32_test_main>)
target_link_libraries(dsv32_nccl_tests PRIVATE dsv32::nccl dsv32::cpu_kernels doctest::doctest)
add_test(NAME dsv32_nccl_tests COMMAND dsv32_nccl_tests)
set_tests_properties(dsv32_nccl_tests PROPERTIES SKIP_REGULAR_EXPRESSION "SKIPPED: no CUDA device")

add_executable(dsv32_nccl_host_tests "${CMAKE_CURRENT_LIST_DIR}/test_nccl_host.cpp" $<TARGET_OBJECTS:dsv32_test_main>)
target_link_libraries(dsv32_nccl_host_tests PRIVATE dsv32::nccl dsv32::cpu_kernels doctest::doctest)
target_compile_options(dsv32_nccl_host_tests PRIVATE -Wall -Wextra -Wpedantic)
add_test(NAME dsv32_nccl_host_tests COMMAND dsv32_nccl_host_tests)

if(TARGET dsv32_mpi AND MPIEXEC_EXECUTABLE)
  add_executable(dsv32_nccl_mpi_tests "${CMAKE_CURRENT_LIST_DIR}/test_nccl_mpi.cpp")
  target_link_libraries(dsv32_nccl_mpi_tests PRIVATE dsv32::nccl dsv32::mpi dsv32::cpu_kernels doctest::doctest)
  target_compile_options(dsv32_nccl_mpi_tests PRIVATE -Wall -Wextra -Wpedantic)
  set(_dsv32_nccl_mpi_env OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
      OMPI_MCA_rmaps_base_oversubscribe=1)
  foreach(variant IN ITEMS "" _failure)
    set(_args)
    set(_env ${_dsv32_nccl_mpi_env})
    if(variant STREQUAL "_failure")  # no such interface: ncclGetUniqueId fails on the root
      set(_args --expect-id-failure)
      list(APPEND _env NCCL_SOCKET_IFNAME=dsv32-no-such-if)
    endif()
    add_test(NAME dsv32_nccl_mpi_bootstrap${variant}
             COMMAND "${MPIEXEC_EXECUTABLE}" ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe ${MPIEXEC_PREFLAGS}
                     "$<TARGET_FILE:dsv32_nccl_mpi_tests>" ${MPIEXEC_POSTFLAGS} ${_args})
    set_tests_properties(dsv32_nccl_mpi_bootstrap${variant} PROPERTIES ENVIRONMENT "${_env}" TIMEOUT 120 PROCESSORS 2)
  endforeach()
  unset(_args)
  unset(_env)
  unset(_dsv32_nccl_mpi_env)
endif()
