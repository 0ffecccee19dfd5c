# dsv32-bench-tokenizer: encode/decode throughput of dsv32::tokenizer on the DeepSeek-V3
# tokenizer. Included by bench/CMakeLists.txt.
if(NOT TARGET dsv32_tokenizer)
  return()
endif()
add_executable(dsv32-bench-tokenizer "${CMAKE_CURRENT_LIST_DIR}/tokenizer_bench.cpp")
target_link_libraries(dsv32-bench-tokenizer PRIVATE dsv32::tokenizer)
target_compile_definitions(dsv32-bench-tokenizer PRIVATE
  DSV32_TOKENIZER_DEFAULT_DIR="${PROJECT_SOURCE_DIR}/tests/data/tokenizer/deepseek_v3")
