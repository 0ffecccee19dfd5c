# Tests of the command-line tools and examples that are not doctest suites: dsv32-inspect (run on
# presets, config.json files and checkpoints, intact and damaged) and examples/embed built against
# an installed dsv32. Included by tests/CMakeLists.txt.


# Writes damaged copies of golden checkpoints (a tensor dropped, one added, one reshaped).
add_executable(dsv32_make_test_checkpoint "${CMAKE_CURRENT_LIST_DIR}/make_test_checkpoint.cpp")
target_link_libraries(dsv32_make_test_checkpoint PRIVATE dsv32::dsv32 dsv32::cpu_kernels)
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(dsv32_make_test_checkpoint PRIVATE -Wall -Wextra -Wpedantic)
endif()

set(_dsv32_inspect_cases preset_671b config_tiny_bf16 config_custom per_rank checkpoint_complete
    checkpoint_damaged bad_arguments checkpoint_hf)
foreach(case IN LISTS _dsv32_inspect_cases)
  add_test(NAME dsv32_inspect_${case}
           COMMAND "${CMAKE_COMMAND}" -DCASE=${case} -DTOOL=$<TARGET_FILE:dsv32-inspect>
                   -DHELPER=$<TARGET_FILE:dsv32_make_test_checkpoint> -DDATA=${PROJECT_SOURCE_DIR}/tests/data
                   -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/inspect/${case}
                   -P "${CMAKE_CURRENT_LIST_DIR}/inspect_test.cmake")
endforeach()
# The quick single-regex form of the headline numbers, for anyone grepping the test list (exit
# status checked too: a PASS_REGULAR_EXPRESSION alone would ignore it).
add_test(NAME dsv32_inspect_671b_counts
         COMMAND "${CMAKE_COMMAND}" "-DCOMMAND=$<TARGET_FILE:dsv32-inspect>|--preset|deepseek-v3.2-exp-671b" -DRC=0
                 "-DSTDOUT=total +671,877,944,064\n +activated per token +38,403,822,336"
                 -P "${PROJECT_SOURCE_DIR}/tests/support/expect_run.cmake")

# examples/embed, built as a user's project against dsv32 installed into a scratch prefix; then its
# text mode, which reports SKIP (not a pass) where this build has no tokenizer component.
if(TARGET dsv32_tokenizer)
  set(_dsv32_has_tokenizer 1)
else()
  set(_dsv32_has_tokenizer 0)
endif()
foreach(part core tokenizer)
  set(name dsv32_embed_example)
  if(part STREQUAL "tokenizer")
    set(name dsv32_embed_example_tokenizer)
  endif()
  add_test(NAME ${name}
           COMMAND "${CMAKE_COMMAND}"
                   -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
                   -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/embed
                   -DGENERATOR=${CMAKE_GENERATOR}
                   -DBUILD_TYPE=${CMAKE_BUILD_TYPE}
                   -DPART=${part} -DEXPECT_TOKENIZER=${_dsv32_has_tokenizer}
                   "-DMPIEXEC=$<$<TARGET_EXISTS:dsv32_mpi>:${MPIEXEC_EXECUTABLE}>"
                   -P "${CMAKE_CURRENT_LIST_DIR}/run_embed_test.cmake")
endforeach()
# (mpirun as root and on 2 cores needs Open MPI's permission)
set_tests_properties(dsv32_embed_example PROPERTIES ENVIRONMENT
                     "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
set_tests_properties(dsv32_embed_example PROPERTIES FIXTURES_SETUP dsv32_embed)
set_tests_properties(dsv32_embed_example_tokenizer PROPERTIES FIXTURES_REQUIRED dsv32_embed
                     SKIP_REGULAR_EXPRESSION "dsv32_embed_example_tokenizer: SKIPPED:")
unset(_dsv32_has_tokenizer)
