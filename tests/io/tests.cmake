# The dsv32-convert tool test: a helper writes a golden scenario as a sharded Hugging Face checkpoint,
# then convert_tool_test.sh runs dsv32-convert on it (a conversion, --help, and error cases with their
# exit codes and messages). The tool itself is defined in tools/CMakeLists.txt.

add_executable(dsv32_make_hf_checkpoint "${CMAKE_CURRENT_LIST_DIR}/tools/make_hf_checkpoint.cpp")
target_link_libraries(dsv32_make_hf_checkpoint PRIVATE dsv32::dsv32 dsv32::cpu_kernels)
target_include_directories(dsv32_make_hf_checkpoint PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}")

add_test(NAME dsv32_convert_tool
         COMMAND bash "${CMAKE_CURRENT_LIST_DIR}/convert_tool_test.sh" "$<TARGET_FILE:dsv32-convert>"
                 "$<TARGET_FILE:dsv32_make_hf_checkpoint>" "${DSV32_TEST_DATA}/golden"
                 "${CMAKE_CURRENT_BINARY_DIR}/convert_tool_test")
