# dsv32-tokenize: command-line encode / decode / chat rendering with dsv32::tokenizer.
# Included by the examples/tools CMake and by tests/tokenizer (for its tool test); the target is
# defined by whichever includes this file first.
if(TARGET dsv32-tokenize OR NOT TARGET dsv32_tokenizer)
  return()
endif()
add_executable(dsv32-tokenize "${CMAKE_CURRENT_LIST_DIR}/dsv32_tokenize.cpp")
target_link_libraries(dsv32-tokenize PRIVATE dsv32::tokenizer)
# Next to the other tools, whichever directory defined it.
set_target_properties(dsv32-tokenize PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/tools")
if(DSV32_INSTALL)
  install(TARGETS dsv32-tokenize RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
endif()
