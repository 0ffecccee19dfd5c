# Tests of dsv32-generate (tools/dsv32_generate.cpp), one CASE of tool_test.cmake per ctest: the
# no-argument run, a golden scenario's greedy tokens, bad arguments and files, and (with the
# tokenizer component) text and chat modes. Included by tests/CMakeLists.txt.


set(_dsv32_generate_cases default_run golden_prompt_ids golden_batch_stdin bad_arguments bad_files)
if(TARGET dsv32_tokenizer)
  list(APPEND _dsv32_generate_cases chat_session chat_replay thinking_arguments text_prompt text_needs_vocabulary)
endif()
find_program(DSV32_SCRIPT_PROGRAM script)  # util-linux: runs a command on a pseudo-terminal
foreach(case IN LISTS _dsv32_generate_cases)
  add_test(NAME dsv32_generate_${case}
           COMMAND "${CMAKE_COMMAND}" -DCASE=${case} -DTOOL=$<TARGET_FILE:dsv32-generate>
                   -DDATA=${PROJECT_SOURCE_DIR}/tests/data
                   -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/generate_tool/${case}
                   "-DSCRIPT=$<$<BOOL:${DSV32_SCRIPT_PROGRAM}>:${DSV32_SCRIPT_PROGRAM}>"
                   -P "${CMAKE_CURRENT_LIST_DIR}/tool_test.cmake")
  # one thread: the tiny models gain nothing from more, and a busy machine makes OpenMP crawl
  set_tests_properties(dsv32_generate_${case} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 120)
endforeach()
unset(_dsv32_generate_cases)

# examples/demo.cpp (when the examples are built): runs out of the box.
if(TARGET dsv32-demo)
  add_test(NAME dsv32_demo_runs COMMAND dsv32-demo --new-tokens 6)
  set_tests_properties(dsv32_demo_runs PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 60
    PASS_REGULAR_EXPRESSION "generated:( [0-9]+)+\nprefill 8 tokens \\+ first token: [0-9.]+ ms .*decode 5 tokens: [0-9.]+ ms/token")
  add_test(NAME dsv32_demo_bad_prompt COMMAND dsv32-demo --prompt "1 600")
  set_tests_properties(dsv32_demo_bad_prompt PROPERTIES WILL_FAIL TRUE)
endif()
