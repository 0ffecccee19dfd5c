# Installs dsv32 into a scratch prefix, then configures, builds and runs tests/consumer/project,
# which uses nothing but find_package(dsv32) — what a user's project does.
# Variables: SOURCE_DIR, WORK_DIR, GENERATOR, BUILD_TYPE.
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test step failed (${rc}): ${ARGV}")
  endif()
endfunction()
run("${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${WORK_DIR}/dsv32" -G "${GENERATOR}"
    -DCMAKE_INSTALL_PREFIX=${prefix} -DDSV32_BUILD_TESTS=OFF -DDSV32_BUILD_EXAMPLES=OFF
    -DDSV32_BUILD_BENCHMARKS=OFF -DDSV32_INSTALL=ON)
run("${CMAKE_COMMAND}" --install "${WORK_DIR}/dsv32")
run("${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/consumer/project" -B "${WORK_DIR}/project" -G "${GENERATOR}"
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
run("${CMAKE_COMMAND}" --build "${WORK_DIR}/project")
run("${WORK_DIR}/project/dsv32_consumer")
