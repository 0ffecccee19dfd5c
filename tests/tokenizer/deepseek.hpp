// The vendored DeepSeek tokenizers (tests/data/tokenizer/<folder>) and their case files, each
// loaded once per test run: DeepSeek-V3's (the default of these helpers) and DeepSeek-V3.2-Exp's.
#pragma once

#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "dsv32/core/error.hpp"
#include "dsv32/tokenizer/tokenizer.hpp"

namespace deepseek {

inline const std::string v3 = "deepseek_v3";              ///< DeepSeek-V3's files
inline const std::string v3_2_exp = "deepseek_v3_2_exp";  ///< DeepSeek-V3.2-Exp's files

inline std::string data_dir(const std::string& folder = v3) { return std::string(DSV32_TOKENIZER_TEST_DATA) + "/" + folder; }

inline const dsv32::Tokenizer& tokenizer(const std::string& folder = v3) {
  static std::map<std::string, dsv32::Tokenizer> loaded;
  auto it = loaded.find(folder);
  if (it == loaded.end()) it = loaded.emplace(folder, dsv32::Tokenizer::from_directory(data_dir(folder))).first;
  return it->second;
}

/// DeepSeek-V3.2-Exp's tokenizer: the model's own, with its chat template (thinking, tool calls).
inline const dsv32::Tokenizer& v3_2_exp_tokenizer() { return tokenizer(v3_2_exp); }

inline const nlohmann::json& cases(const std::string& file, const std::string& folder = v3) {
  static std::map<std::string, nlohmann::json> loaded;
  const std::string key = folder + "/" + file;
  auto it = loaded.find(key);
  if (it == loaded.end()) it = loaded.emplace(key, dsv32::bpe::read_json_file(data_dir(folder) + "/" + file)).first;
  return it->second;
}

/// The message of the dsv32::Error that f() throws, or "no error" when it returns.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const dsv32::Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace deepseek
