# Runs one command and checks both its exit status and its output — what a ctest
# PASS_REGULAR_EXPRESSION or WILL_FAIL cannot do (either one makes ctest ignore the exit status).
#   cmake -DCOMMAND=<exe|arg|arg...> -DRC=<status or "nonzero"> [-DSTDOUT=<regex>] [-DSTDERR=<regex>]
#         [-DOUTPUT=<regex>] [-DNOT_STDOUT=<regex>] -P expect_run.cmake
# COMMAND separates the program and its arguments with '|' (a ctest command line would split a ';'
# list). Regexes are CMake's (no {n}); STDOUT, STDERR and OUTPUT (the two together) must match,
# NOT_STDOUT must not.
cmake_minimum_required(VERSION 3.20)
string(REPLACE "|" ";" command "${COMMAND}")
execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
string(REPLACE ";" " " shown "${command}")
set(show "${shown}\n--- stdout:\n${stdout}\n--- stderr:\n${stderr}")
if(RC STREQUAL "nonzero")
  if(rc STREQUAL "0")
    message(FATAL_ERROR "expected a non-zero exit status, got 0: ${show}")
  endif()
elseif(NOT rc STREQUAL RC)
  message(FATAL_ERROR "expected exit status ${RC}, got ${rc}: ${show}")
endif()
if(DEFINED OUTPUT AND NOT "${stdout}${stderr}" MATCHES "${OUTPUT}")
  message(FATAL_ERROR "the output does not match '${OUTPUT}': ${show}")
endif()
if(DEFINED STDOUT AND NOT stdout MATCHES "${STDOUT}")
  message(FATAL_ERROR "standard output does not match '${STDOUT}': ${show}")
endif()
if(DEFINED STDERR AND NOT stderr MATCHES "${STDERR}")
  message(FATAL_ERROR "standard error does not match '${STDERR}': ${show}")
endif()
if(DEFINED NOT_STDOUT AND stdout MATCHES "${NOT_STDOUT}")
  message(FATAL_ERROR "standard output matches '${NOT_STDOUT}': ${show}")
endif()
message(STATUS "ok (exit status ${rc}): ${shown}")
