# dsv32-generate: generation from a checkpoint directory or an embedded tiny model, token ids in and
# out; text, streamed text and interactive chat when the tokenizer component (dsv32::tokenizer) is
# built. Included by tools/CMakeLists.txt and by tests/generate/tests.cmake (for its tests); the
# target is defined by whichever includes this file first.
if(TARGET dsv32-generate)
  return()
endif()
add_executable(dsv32-generate "${CMAKE_CURRENT_LIST_DIR}/dsv32_generate.cpp")
if(TARGET dsv32_tokenizer)
  target_link_libraries(dsv32-generate PRIVATE dsv32::tokenizer)
  target_compile_definitions(dsv32-generate PRIVATE
    DSV32_GENERATE_WITH_TOKENIZER=1
    # the vendored DeepSeek-V3 tokenizer: the default of text modes when nothing else is given
    DSV32_GENERATE_DEFAULT_TOKENIZER="${PROJECT_SOURCE_DIR}/tests/data/tokenizer/deepseek_v3")
else()
  target_link_libraries(dsv32-generate PRIVATE dsv32::dsv32)
endif()
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(dsv32-generate PRIVATE -Wall -Wextra -Wpedantic)
endif()
# Next to the other tools, whichever directory defined it.
set_target_properties(dsv32-generate PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/tools")
if(DSV32_INSTALL)
  install(TARGETS dsv32-generate RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
endif()
