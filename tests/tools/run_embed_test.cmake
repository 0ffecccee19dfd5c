# Installs dsv32 into a scratch prefix, then configures, builds (-Wall -Wextra -Werror) and runs
# examples/embed against it, as a user's project would: nothing but find_package(dsv32).
# Runs the example with its own config (random weights) and with a golden checkpoint.
# Variables: SOURCE_DIR, WORK_DIR, GENERATOR, BUILD_TYPE; PART: "core" (install, build, run) or
# "tokenizer" (run the built example with text in and out: a second ctest, after the first);
# EXPECT_TOKENIZER: whether the tested build has the tokenizer component (1 or 0); MPIEXEC: mpirun,
# where the tested build has the MPI component (the example then also runs under mpirun -n 2).
if(NOT PART)
  set(PART core)
endif()
set(prefix "${WORK_DIR}/prefix")
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "embed test step failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()
function(expect output regex)
  if(NOT output MATCHES "${regex}")
    message(FATAL_ERROR "expected output matching '${regex}', got:\n${output}")
  endif()
endfunction()

string(REPEAT " [0-9]+" 8 eight_tokens)  # CMake's regex has no {n}

if(PART STREQUAL "tokenizer")
  # With the tokenizer component (installed with dsv32 when PCRE2 is present): text in, text out.
  file(GLOB_RECURSE tokenizer_targets "${prefix}/*/dsv32TokenizerTargets.cmake")
  if(NOT EXISTS "${WORK_DIR}/embed/embed")
    message(FATAL_ERROR "no built example in ${WORK_DIR}/embed: dsv32_embed_example (which builds it) failed")
  endif()
  if(NOT tokenizer_targets)
    if(EXPECT_TOKENIZER)
      message(FATAL_ERROR "this build has the tokenizer component but the installed package lacks dsv32TokenizerTargets.cmake")
    endif()
    message("dsv32_embed_example_tokenizer: SKIPPED: this build has no tokenizer component (PCRE2 missing or "
            "DSV32_BUILD_TOKENIZER=OFF), so the example's text mode was not tested")
    return()
  endif()
  run("${WORK_DIR}/embed/embed" --tokenizer "${SOURCE_DIR}/tests/data/tokenizer/deepseek_v3_2_exp" "What is 2+2?")
  message(STATUS "embed with tokenizer: ${out}")
  # DeepSeek-V3.2-Exp's template: bos, <｜User｜>, the question's 7 tokens, <｜Assistant｜>, </think>
  expect("${out}" "^my-small-moe:.*\n11 prompt tokens, [0-9]+ generated")
  # DeepSeek-V3's: bos, <｜User｜>, the question's 7 tokens, <｜Assistant｜>
  run("${WORK_DIR}/embed/embed" --tokenizer "${SOURCE_DIR}/tests/data/tokenizer/deepseek_v3" "What is 2+2?")
  expect("${out}" "^my-small-moe:.*\n10 prompt tokens, [0-9]+ generated")
  return()
endif()

file(REMOVE_RECURSE "${WORK_DIR}")
run("${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${WORK_DIR}/dsv32" -G "${GENERATOR}"
    -DCMAKE_INSTALL_PREFIX=${prefix} -DDSV32_BUILD_TESTS=OFF -DDSV32_BUILD_EXAMPLES=OFF
    -DDSV32_BUILD_BENCHMARKS=OFF -DDSV32_INSTALL=ON)
run("${CMAKE_COMMAND}" --install "${WORK_DIR}/dsv32")
if(NOT BUILD_TYPE)
  set(BUILD_TYPE Release)
endif()
run("${CMAKE_COMMAND}" -S "${SOURCE_DIR}/examples/embed" -B "${WORK_DIR}/embed" -G "${GENERATOR}"
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=${BUILD_TYPE} "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Werror")
run("${CMAKE_COMMAND}" --build "${WORK_DIR}/embed")

run("${WORK_DIR}/embed/embed")
message(STATUS "embed: ${out}")
expect("${out}" "^my-small-moe:${eight_tokens}\n5 prompt tokens, 8 generated, [0-9.]+ tokens/s\n$")
run("${WORK_DIR}/embed/embed" "${SOURCE_DIR}/tests/data/golden/tiny_bf16")
message(STATUS "embed tiny_bf16: ${out}")
expect("${out}" "^tiny_bf16:${eight_tokens}\n5 prompt tokens, 8 generated")
# The serving engine: two requests run to their 8 tokens, the long one is cancelled after at least 3,
# every page is back in the pool.
run("${WORK_DIR}/embed/embed" --serve)
message(STATUS "embed --serve: ${out}")
expect("${out}" "^request 0: 8 tokens, max_new_tokens, first token after [0-9.]+ ms:${eight_tokens}\n")
expect("${out}" "\nrequest 1: [0-9]+ tokens, cancelled, ")
expect("${out}" "\nrequest 2: 8 tokens, max_new_tokens, ")
expect("${out}" "\nengine: [0-9]+ steps, 0 of [0-9]+ pages in use after the run\n$")

# Under mpirun -n 2 (when the package has the MPI component): rank 0 prints once, both ranks compute.
file(GLOB_RECURSE mpi_targets "${prefix}/*/dsv32MpiTargets.cmake")
if(mpi_targets AND MPIEXEC)
  run("${MPIEXEC}" -n 2 --oversubscribe "${WORK_DIR}/embed/embed")
  message(STATUS "mpirun -n 2 embed: ${out}")
  expect("${out}" "^my-small-moe:${eight_tokens}\n5 prompt tokens, 8 generated, [0-9.]+ tokens/s\n$")
  run("${MPIEXEC}" -n 2 --oversubscribe "${WORK_DIR}/embed/embed" --serve)
  message(STATUS "mpirun -n 2 embed --serve: ${out}")
  expect("${out}" "^request 0: 8 tokens, max_new_tokens, ")
  expect("${out}" "\nengine: [0-9]+ steps, 0 of [0-9]+ pages in use after the run\n$")
elseif(MPIEXEC)
  message(FATAL_ERROR "this build has the MPI component but the installed package lacks dsv32MpiTargets.cmake")
endif()

# A checkpoint no compiled config matches is refused with dsv32::Error's message, exit status 1.
execute_process(COMMAND "${WORK_DIR}/embed/embed" "${SOURCE_DIR}/tests/data/golden/tiny_fp8_plain_scale"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "embed on an uncompiled config: expected exit status 1, got ${rc}\n${out}\n${err}")
endif()
expect("${err}" "embed: dsv32 \\[invalid_config\\].*matches none of the configs compiled into this program")
