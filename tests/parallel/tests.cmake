# Model parallelism over MPI (tests/parallel/test_mpi.cpp, its own doctest main with MPI), run under
# `mpirun -n 2 --oversubscribe` with one OpenMP thread per rank, as root where the tests run as root
# (Open MPI refuses root unless told). A ctest TIMEOUT turns a hang (ranks out of step) into a failure.
# Where MPI was not found (cmake/mpi.cmake) the tests report themselves skipped, loudly.

set(_dsv32_mpi_env OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    OMPI_MCA_rmaps_base_oversubscribe=1)
if(DSV32_SANITIZE)  # Open MPI does not free what MPI_Init allocates: LeakSanitizer would fail every run
  list(APPEND _dsv32_mpi_env ASAN_OPTIONS=detect_leaks=0)
endif()
if(TARGET dsv32_mpi AND MPIEXEC_EXECUTABLE)
  add_executable(dsv32_mpi_tests "${CMAKE_CURRENT_LIST_DIR}/test_mpi.cpp")
  target_link_libraries(dsv32_mpi_tests PRIVATE dsv32::mpi dsv32::cpu_kernels doctest::doctest)
  target_include_directories(dsv32_mpi_tests PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}")
  target_compile_options(dsv32_mpi_tests PRIVATE -Wall -Wextra -Wpedantic)
  add_test(NAME dsv32_mpi_tests
           COMMAND "${MPIEXEC_EXECUTABLE}" ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe ${MPIEXEC_PREFLAGS}
                   "$<TARGET_FILE:dsv32_mpi_tests>" ${MPIEXEC_POSTFLAGS})
  set_tests_properties(dsv32_mpi_tests PROPERTIES ENVIRONMENT "${_dsv32_mpi_env}" TIMEOUT 300 PROCESSORS 2)

  # dsv32-generate under mpirun: rank 0 prints, every rank computes, the output equals --world-size 2
  # (threads); errors on one rank or all: one message, every rank exits.
  add_test(NAME dsv32_generate_mpi
           COMMAND "${CMAKE_COMMAND}" "-DGENERATE=$<TARGET_FILE:dsv32-generate>" "-DMPIEXEC=${MPIEXEC_EXECUTABLE}"
                   "-DGOLDEN=${DSV32_TEST_DATA}/golden" "-DCONFIGS=${DSV32_TEST_DATA}/configs"
                   "-DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/generate_mpi"
                   -P "${CMAKE_CURRENT_LIST_DIR}/generate_mpi_test.cmake")
  set_tests_properties(dsv32_generate_mpi PROPERTIES ENVIRONMENT "${_dsv32_mpi_env}" TIMEOUT 300 PROCESSORS 2)
else()
  foreach(t dsv32_mpi_tests dsv32_generate_mpi)
    add_test(NAME ${t} COMMAND sh -c "echo '${t}: SKIPPED: MPI (libopenmpi-dev, openmpi-bin) was not found, so nothing ran over MPI (scripts/setup.sh installs it)' >&2; exit 77")
    set_tests_properties(${t} PROPERTIES SKIP_RETURN_CODE 77 SKIP_REGULAR_EXPRESSION "SKIPPED: ")
  endforeach()
endif()
unset(_dsv32_mpi_env)
