# dsv32-inspect: a config's shapes, parameter counts, bytes per dtype, cache bytes per token and
# memory plan; and the tensors a checkpoint has, lacks or has in excess.
# Included by tools/CMakeLists.txt and by tests/tools/tests.cmake (for its tests); the target is
# defined by whichever includes this file first.
if(TARGET dsv32-inspect)
  return()
endif()
add_executable(dsv32-inspect "${CMAKE_CURRENT_LIST_DIR}/dsv32_inspect.cpp")
target_link_libraries(dsv32-inspect PRIVATE dsv32::dsv32)
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(dsv32-inspect PRIVATE -Wall -Wextra -Wpedantic)
endif()
# Next to the other tools, whichever directory defined it.
set_target_properties(dsv32-inspect PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/tools")
if(DSV32_INSTALL)
  install(TARGETS dsv32-inspect RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
endif()
