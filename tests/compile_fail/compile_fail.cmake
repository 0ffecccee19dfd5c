# Each tests/compile_fail/*.cpp instantiates a config that breaks one invariant, or hands memory of one
# space to code of another (a backend's kernel, a host observer). The test builds it
# (EXCLUDE_FROM_ALL target) and passes only if the compiler's output names the field, as the
# static_assert message does. The expected field is written in the file as `// expect: <regex>`.
file(GLOB DSV32_COMPILE_FAIL_SOURCES CONFIGURE_DEPENDS "${CMAKE_CURRENT_LIST_DIR}/*.cpp")
foreach(src IN LISTS DSV32_COMPILE_FAIL_SOURCES)
  get_filename_component(stem "${src}" NAME_WE)
  file(STRINGS "${src}" expect_line REGEX "^// expect: ")
  string(REGEX REPLACE "^// expect: " "" expect "${expect_line}")
  set(target "dsv32_compile_fail_${stem}")
  add_executable(${target} EXCLUDE_FROM_ALL "${src}")
  target_link_libraries(${target} PRIVATE dsv32::dsv32)
  # the build must fail (non-zero status) with the field in its output
  add_test(NAME ${target}
           COMMAND "${CMAKE_COMMAND}" "-DCOMMAND=${CMAKE_COMMAND}|--build|${CMAKE_BINARY_DIR}|--target|${target}|--config|$<CONFIG>"
                   -DRC=nonzero "-DOUTPUT=${expect}" -P "${PROJECT_SOURCE_DIR}/tests/support/expect_run.cmake")
  # the build tree is shared: one compile-fail build at a time
  set_tests_properties(${target} PROPERTIES RESOURCE_LOCK dsv32_build_tree)
endforeach()
# A config that satisfies every invariant must compile (the check above is not vacuous).
add_executable(dsv32_compile_ok EXCLUDE_FROM_ALL "${CMAKE_CURRENT_LIST_DIR}/valid_config.cxx")
target_link_libraries(dsv32_compile_ok PRIVATE dsv32::dsv32 dsv32::cpu_kernels)
add_test(NAME dsv32_compile_ok COMMAND "${CMAKE_COMMAND}" --build "${CMAKE_BINARY_DIR}" --target dsv32_compile_ok --config $<CONFIG>)
set_tests_properties(dsv32_compile_ok PROPERTIES RESOURCE_LOCK dsv32_build_tree)
# The memory-space tests' control: the same calls with matching spaces compile.
add_executable(dsv32_compile_ok_views EXCLUDE_FROM_ALL "${CMAKE_CURRENT_LIST_DIR}/views_ok.cxx")
target_link_libraries(dsv32_compile_ok_views PRIVATE dsv32::dsv32 dsv32::cpu_kernels)
add_test(NAME dsv32_compile_ok_views
         COMMAND "${CMAKE_COMMAND}" --build "${CMAKE_BINARY_DIR}" --target dsv32_compile_ok_views --config $<CONFIG>)
set_tests_properties(dsv32_compile_ok_views PROPERTIES RESOURCE_LOCK dsv32_build_tree)
