// The vendored DeepSeek-V3 tokenizer and its case files, loaded once per test run.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "dsv32/tokenizer/tokenizer.hpp"

namespace deepseek {

inline std::string data_dir() { return std::string(DSV32_TOKENIZER_TEST_DATA) + "/deepseek_v3"; }

inline const dsv32::Tokenizer& tokenizer() {
  static const dsv32::Tokenizer tok = dsv32::Tokenizer::from_directory(data_dir());
  return tok;
}

inline const nlohmann::json& cases(const std::string& file) {
  static std::map<std::string, nlohmann::json> loaded;
  auto it = loaded.find(file);
  if (it == loaded.end()) it = loaded.emplace(file, dsv32::bpe::read_json_file(data_dir() + "/" + file)).first;
  return it->second;
}

}  // namespace deepseek
