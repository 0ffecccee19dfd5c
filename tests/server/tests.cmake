# Tests of the OpenAI-compatible server. Included by tests/CMakeLists.txt.
#  - dsv32_server_unit_tests: the protocol (serving/openai.hpp) and metrics (serving/metrics.hpp)
#    without HTTP or a model.
#  - dsv32_server_*: dsv32-server run on loopback and driven by the official `openai` Python client
#    (and raw HTTP where the client hides what is checked): test_server.py, one ctest per group. The
#    client lives in the virtual environment scripts/setup.sh makes (DSV32_TEST_PYTHON).

add_executable(dsv32_server_unit_tests "${CMAKE_CURRENT_LIST_DIR}/test_openai.cpp" $<TARGET_OBJECTS:dsv32_test_main>)
target_link_libraries(dsv32_server_unit_tests PRIVATE dsv32::dsv32 doctest::doctest)
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(dsv32_server_unit_tests PRIVATE -Wall -Wextra -Wpedantic -Wshadow)
endif()
add_test(NAME dsv32_server_unit_tests COMMAND dsv32_server_unit_tests)

if(NOT TARGET dsv32-server)
  return()
endif()

set(DSV32_TEST_PYTHON "${PROJECT_SOURCE_DIR}/.venv/bin/python"
    CACHE FILEPATH "Python with the openai client for the server tests (scripts/setup.sh makes this virtual environment)")
# group -> seconds allowed (the demo model under the sanitizers is several times slower)
set(_dsv32_server_groups models=120 chat=180 completions=180 errors=180 scripted=180 concurrency=240 load=300
    disconnect=120 faults=180 shutdown=300 checkpoint=120 cli=120)
foreach(entry IN LISTS _dsv32_server_groups)
  string(REPLACE "=" ";" entry "${entry}")
  list(GET entry 0 group)
  list(GET entry 1 timeout)
  add_test(NAME dsv32_server_${group}
           COMMAND sh -c "test -x \"$1\" || { echo \"$1 not found: scripts/setup.sh makes the virtual environment with the openai client\" >&2; exit 1; }; exec \"$@\""
                   sh "${DSV32_TEST_PYTHON}" "${CMAKE_CURRENT_LIST_DIR}/test_server.py" ${group}
                   --server $<TARGET_FILE:dsv32-server> --data "${PROJECT_SOURCE_DIR}/tests/data"
                   --tokenize $<TARGET_FILE:dsv32-tokenize> --generate $<TARGET_FILE:dsv32-generate>)
  # one model thread: the demo model gains nothing from more, and ctest -j2 runs two tests at once;
  # the load test takes both cores (64 clients and the server)
  set_tests_properties(dsv32_server_${group} PROPERTIES TIMEOUT ${timeout} ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()
set_tests_properties(dsv32_server_load PROPERTIES PROCESSORS 2)
unset(_dsv32_server_groups)
