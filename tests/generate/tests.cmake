# Tests of dsv32-generate (tools/dsv32_generate.cpp), one CASE of tool_test.cmake per ctest: the
# no-argument run, a golden scenario's greedy tokens, bad arguments and files, and (with the
# tokenizer component) text and chat modes. Included by tests/CMakeLists.txt.


set(_dsv32_generate_cases default_run golden_prompt_ids golden_batch_stdin bad_arguments bad_files world_size)
if(TARGET dsv32_tokenizer)
  list(APPEND _dsv32_generate_cases chat_session chat_replay chat_replay_v3_2 thinking_arguments text_prompt
       text_needs_vocabulary)
endif()
set(_dsv32_tokenize_arg "")
if(TARGET dsv32-tokenize)  # the text modes' tests check their output against ids decoded by it
  set(_dsv32_tokenize_arg "-DTOKENIZE=$<TARGET_FILE:dsv32-tokenize>")
endif()
find_program(DSV32_SCRIPT_PROGRAM script)  # util-linux: runs a command on a pseudo-terminal
foreach(case IN LISTS _dsv32_generate_cases)
  add_test(NAME dsv32_generate_${case}
           COMMAND "${CMAKE_COMMAND}" -DCASE=${case} -DTOOL=$<TARGET_FILE:dsv32-generate>
                   ${_dsv32_tokenize_arg}
                   -DDATA=${PROJECT_SOURCE_DIR}/tests/data
                   -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/generate_tool/${case}
                   "-DSCRIPT=$<$<BOOL:${DSV32_SCRIPT_PROGRAM}>:${DSV32_SCRIPT_PROGRAM}>"
                   -P "${CMAKE_CURRENT_LIST_DIR}/tool_test.cmake")
  # one thread: the tiny models gain nothing from more, and a busy machine makes OpenMP crawl
  set_tests_properties(dsv32_generate_${case} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 120)
endforeach()
unset(_dsv32_generate_cases)
unset(_dsv32_tokenize_arg)

# examples/demo.cpp (when the examples are built): runs out of the box, exit status 0; a prompt
# outside the vocabulary fails with exit status 1 and dsv32::Error's message; a prompt that is not
# ids is a usage error (2).
if(TARGET dsv32-demo)
  set(_expect_run "${PROJECT_SOURCE_DIR}/tests/support/expect_run.cmake")
  add_test(NAME dsv32_demo_runs
           COMMAND "${CMAKE_COMMAND}" "-DCOMMAND=$<TARGET_FILE:dsv32-demo>|--new-tokens|6" -DRC=0
                   "-DSTDOUT=generated:( [0-9]+)+\nprefill 8 tokens \\+ first token: [0-9.]+ ms .*decode 5 tokens: [0-9.]+ ms/token"
                   -P "${_expect_run}")
  add_test(NAME dsv32_demo_bad_prompt
           COMMAND "${CMAKE_COMMAND}" "-DCOMMAND=$<TARGET_FILE:dsv32-demo>|--prompt|1 600" -DRC=1
                   "-DSTDERR=dsv32 \\[invalid_argument\\]: generate: prompt 0 token 1 is 600, outside the vocabulary \\[0, [0-9]+\\)"
                   -P "${_expect_run}")
  add_test(NAME dsv32_demo_bad_prompt_text
           COMMAND "${CMAKE_COMMAND}" "-DCOMMAND=$<TARGET_FILE:dsv32-demo>|--prompt|1 x" -DRC=2
                   "-DSTDERR='x' \\(id 2\\) is not a token id" -P "${_expect_run}")
  set_tests_properties(dsv32_demo_runs dsv32_demo_bad_prompt dsv32_demo_bad_prompt_text PROPERTIES
                       ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 60)
  unset(_expect_run)
endif()
