# The CUDA backend's suite: one nvcc translation unit (tests/cuda/test_cuda.cu) with the shared doctest
# main, built where CMake found the CUDA toolkit (target dsv32::cuda). Without a device every case
# prints "SKIPPED: no CUDA device" and ctest reports the test as skipped, not passed.
# Included by tests/CMakeLists.txt.
if(NOT TARGET dsv32_cuda)
  return()
endif()

add_executable(dsv32_cuda_tests "${CMAKE_CURRENT_LIST_DIR}/test_cuda.cu" $<TARGET_OBJECTS:dsv32_test_main>)
target_link_libraries(dsv32_cuda_tests PRIVATE dsv32::cuda doctest::doctest)
target_include_directories(dsv32_cuda_tests PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}")
target_compile_definitions(dsv32_cuda_tests PRIVATE DSV32_TEST_DATA="${DSV32_TEST_DATA}")
add_test(NAME dsv32_cuda_tests COMMAND dsv32_cuda_tests)
set_tests_properties(dsv32_cuda_tests PROPERTIES SKIP_REGULAR_EXPRESSION "SKIPPED: no CUDA device")
