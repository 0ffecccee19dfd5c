# The sanitizer build, run by the regular test command (README.md, .ci/run): a second build
# directory, <build>/sanitize, made by scripts/sanitizer-build.sh with clang — every test suite and
# tool with -fsanitize=address,undefined -fno-sanitize-recover=all, the concurrency tests under
# ThreadSanitizer, the libFuzzer targets — then its tests: the unit, golden, tokenizer, concurrency
# and tool suites, and a short smoke run of each fuzz target over its seeds and kept regressions.
# Included by tests/CMakeLists.txt (not inside the sanitizer build itself).
#
# Both tests take the two cores (PROCESSORS 2): the build runs make -j2 and the tests ctest -j2.
# Where clang or its sanitizer runtime is missing they report SKIP, loudly, rather than pass.

if(DSV32_SANITIZE)
  return()
endif()

find_program(DSV32_SANITIZER_CXX NAMES clang++-14 DOC "clang for the sanitizer build (scripts/setup.sh installs clang-14)")
set(_dsv32_sanitize_dir "${PROJECT_BINARY_DIR}/sanitize")
set(_dsv32_fuzzer_runtime "")
if(DSV32_SANITIZER_CXX)
  execute_process(COMMAND "${DSV32_SANITIZER_CXX}" --print-file-name=libclang_rt.fuzzer-x86_64.a
                  OUTPUT_VARIABLE _dsv32_fuzzer_runtime OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()

if(DSV32_SANITIZER_CXX AND EXISTS "${_dsv32_fuzzer_runtime}")
  add_test(NAME dsv32_sanitizer_build
           COMMAND "${CMAKE_COMMAND}" -E env "DSV32_SANITIZER_CXX=${DSV32_SANITIZER_CXX}"
                   bash "${PROJECT_SOURCE_DIR}/scripts/sanitizer-build.sh" "${_dsv32_sanitize_dir}")
  set_tests_properties(dsv32_sanitizer_build PROPERTIES FIXTURES_SETUP dsv32_sanitizer PROCESSORS 2 TIMEOUT 2400)
  # Not run there: the documentation, the compile-time checks and the installed-package test, which
  # build rather than run code (the regular build runs them).
  add_test(NAME dsv32_sanitizer_tests
           COMMAND "${CMAKE_CTEST_COMMAND}" --test-dir "${_dsv32_sanitize_dir}" --output-on-failure -j2
                   -E "^(dsv32_doxygen|dsv32_embed_example.*|dsv32_compile_.*)$")
  set_tests_properties(dsv32_sanitizer_tests PROPERTIES FIXTURES_REQUIRED dsv32_sanitizer PROCESSORS 2 TIMEOUT 2400
                       FAIL_REGULAR_EXPRESSION "No tests were found")
else()
  message(STATUS "clang++-14 with libclang-rt-14-dev not found: the sanitizer build tests will report themselves skipped")
  foreach(t dsv32_sanitizer_build dsv32_sanitizer_tests)
    add_test(NAME ${t} COMMAND sh -c "echo '${t}: SKIPPED: clang++-14 or its sanitizer and libFuzzer runtime (libclang-rt-14-dev) is missing, so nothing ran under ASan/UBSan/TSan and no fuzz target ran (scripts/setup.sh installs them)' >&2; exit 77")
    set_tests_properties(${t} PROPERTIES SKIP_RETURN_CODE 77)
  endforeach()
endif()
unset(_dsv32_sanitize_dir)
unset(_dsv32_fuzzer_runtime)
