# The concurrency tests (test_concurrency.cpp): models and tokenizers used from several threads at
# once. Included by tests/CMakeLists.txt; they need the tokenizer component. With
# DSV32_TSAN_TESTS (the sanitizer build) they are built a second time under ThreadSanitizer.

if(TARGET dsv32_tokenizer)
  add_executable(dsv32_concurrency_tests "${CMAKE_CURRENT_LIST_DIR}/test_concurrency.cpp" $<TARGET_OBJECTS:dsv32_test_main>)
  target_link_libraries(dsv32_concurrency_tests PRIVATE dsv32::tokenizer dsv32::cpu_kernels doctest::doctest)
  target_include_directories(dsv32_concurrency_tests PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}")
  target_compile_definitions(dsv32_concurrency_tests PRIVATE DSV32_TEST_DATA="${DSV32_TEST_DATA}")
  target_compile_options(dsv32_concurrency_tests PRIVATE -Wall -Wextra -Wpedantic)
  add_test(NAME dsv32_concurrency_tests COMMAND dsv32_concurrency_tests)
  set_tests_properties(dsv32_concurrency_tests PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 300)
  if(DSV32_TSAN_TESTS)
    add_subdirectory("${CMAKE_CURRENT_LIST_DIR}/tsan" concurrency_tsan)
  endif()
endif()
