# dsv32-convert: splits a Hugging Face checkpoint into the reference's model-parallel shards.
# Included by the examples/tools CMake and by tests/io/tests.cmake (for its tool test); the target is
# defined by whichever includes this file first.
if(TARGET dsv32-convert)
  return()
endif()
add_executable(dsv32-convert "${CMAKE_CURRENT_LIST_DIR}/dsv32_convert.cpp")
target_link_libraries(dsv32-convert PRIVATE dsv32::dsv32)
# Next to the other tools, whichever directory defined it.
set_target_properties(dsv32-convert PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/tools")
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(dsv32-convert PRIVATE -Wall -Wextra -Wpedantic)
endif()
if(DSV32_INSTALL)
  install(TARGETS dsv32-convert RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
endif()
