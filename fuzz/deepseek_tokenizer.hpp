// The vendored DeepSeek tokenizers (tests/data/tokenizer/deepseek_v3 and deepseek_v3_2_exp, whose
// tokenizer.json DeepSeek-V3.2 shares), loaded once per fuzzing process, for the targets that fuzz
// what a loaded tokenizer is given rather than its files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <dsv32/tokenizer.hpp>

namespace dsv32::fuzz {

inline const Tokenizer& deepseek_tokenizer() {
  static const Tokenizer tok = Tokenizer::from_directory(DSV32_FUZZ_DATA "/tokenizer/deepseek_v3");
  return tok;
}

/// DeepSeek-V3.2-Exp's tokenizer (V3's vocabulary with <think> and </think>), also DeepSeek-V3.2's.
inline const Tokenizer& deepseek_v3_2_exp_tokenizer() {
  static const Tokenizer tok = Tokenizer::from_directory(DSV32_FUZZ_DATA "/tokenizer/deepseek_v3_2_exp");
  return tok;
}

/// Token ids read from fuzz bytes, 3 bytes each (little-endian, 17 bits): 0 .. 131,071, mostly in
/// a DeepSeek vocabulary (128,815 ids), so that a few land outside it.
inline std::vector<std::int32_t> ids_from_bytes(const std::uint8_t* data, std::size_t size) {
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i + 3 <= size; i += 3) {
    ids.push_back(static_cast<std::int32_t>(data[i] | (data[i + 1] << 8) | ((data[i + 2] & 0x01u) << 16)));
  }
  return ids;
}

}  // namespace dsv32::fuzz
