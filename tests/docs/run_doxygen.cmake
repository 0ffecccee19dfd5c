# Runs doxygen on SOURCE_DIR/Doxyfile from SOURCE_DIR (the Doxyfile's paths are relative to it),
# with the output redirected to OUTPUT_DIR, and fails on a non-zero exit or any warning.
# Variables: DOXYGEN (the executable), SOURCE_DIR, OUTPUT_DIR.
cmake_minimum_required(VERSION 3.20)

file(READ "${SOURCE_DIR}/Doxyfile" config)
# Later assignments win in a Doxyfile: only where the output and the warnings go change. Warnings go
# to stderr (not a log file) so that this script sees every one of them.
string(APPEND config "\nOUTPUT_DIRECTORY = \"${OUTPUT_DIR}\"\nWARN_LOGFILE =\n")
file(MAKE_DIRECTORY "${OUTPUT_DIR}")
file(WRITE "${OUTPUT_DIR}/Doxyfile.ctest" "${config}")

execute_process(COMMAND "${DOXYGEN}" -
                INPUT_FILE "${OUTPUT_DIR}/Doxyfile.ctest"
                WORKING_DIRECTORY "${SOURCE_DIR}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
set(all "${stdout}${stderr}")
# The Doxyfile turns warnings into errors (WARN_AS_ERROR); match both words so a looser Doxyfile
# still fails here.
string(REGEX MATCHALL "[^\n]*(warning|error):[^\n]*" problems "${all}")
list(LENGTH problems n)
if(NOT rc EQUAL 0 OR n GREATER 0)
  message(FATAL_ERROR "doxygen: exit status ${rc}, ${n} warning(s); the documentation must build cleanly:\n${all}")
endif()
message(STATUS "doxygen: no warnings; HTML in ${OUTPUT_DIR}/html")
