// The vendored DeepSeek-V3 tokenizer (tests/data/tokenizer/deepseek_v3), loaded once per fuzzing
// process, for the targets that fuzz what a loaded tokenizer is given rather than its files.
#pragma once

#include <dsv32/tokenizer.hpp>

namespace dsv32::fuzz {

inline const Tokenizer& deepseek_tokenizer() {
  static const Tokenizer tok = Tokenizer::from_directory(DSV32_FUZZ_DATA "/tokenizer/deepseek_v3");
  return tok;
}

}  // namespace dsv32::fuzz
