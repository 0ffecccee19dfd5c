// Test helper for the dsv32-convert tool test: writes a golden scenario's weights as a sharded
// Hugging Face checkpoint (with a tokenizer file to copy).
// usage: dsv32_make_hf_checkpoint SCENARIO_DIR OUT_DIR [N_SHARDS]
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include "io/hf_test_support.hpp"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::cerr << "usage: dsv32_make_hf_checkpoint SCENARIO_DIR OUT_DIR [N_SHARDS]\n";
    return 2;
  }
  try {
    const int shards = argc == 4 ? std::stoi(argv[3]) : 3;
    dsv32_test::hf_checkpoint_from_golden(argv[1], argv[2], shards);
    dsv32_test::write_text(std::filesystem::path(argv[2]) / "tokenizer_config.json", "{}\n");
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "dsv32_make_hf_checkpoint: " << e.what() << "\n";
    return 1;
  }
}
