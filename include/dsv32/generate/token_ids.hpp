/// \file
/// \brief parse_token_ids(): token ids written as text ("97 260 130", "97,260,130"), the prompt
///        format of dsv32-generate's `--prompt-ids` and batch files and of dsv32-demo's `--prompt`.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "dsv32/core/error.hpp"

namespace dsv32 {

/// \addtogroup generate
/// @{

/// \brief Reads token ids from text: decimal integers in [0, 2^31 - 1] separated by spaces, tabs,
///        line breaks or commas (any number of each; none at all gives no ids).
///
/// Nothing else is accepted: no sign, no hexadecimal, no fraction, no other character. The text is
/// untrusted (a prompt file, standard input); a bad word is quoted (shortened, control bytes
/// escaped) in the error.
/// \param text  the ids
/// \param where what the text is, for the message (e.g. "--prompt-ids", "batch file line 3")
/// \throws Error(invalid_argument) naming `where`, the word's position and the word.
inline std::vector<std::int32_t> parse_token_ids(std::string_view text, std::string_view where = "token ids") {
  auto separator = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == '\v' || c == '\f'; };
  std::vector<std::int32_t> ids;
  std::size_t i = 0;
  while (i < text.size()) {
    if (separator(text[i])) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && !separator(text[end])) ++end;
    const std::string_view word = text.substr(i, end - i);
    std::int32_t value = 0;
    const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), value, 10);
    const bool ok = ec == std::errc() && ptr == word.data() + word.size() && word.front() != '-' && value >= 0;
    if (!ok) {
      std::string shown;
      for (std::size_t k = 0; k < word.size() && k < 40; ++k) {
        const auto c = static_cast<unsigned char>(word[k]);
        if (c < 0x20 || c >= 0x7f) {
          static constexpr char hex[] = "0123456789abcdef";
          shown += "\\x";
          shown += hex[c >> 4];
          shown += hex[c & 15];
        } else {
          shown += static_cast<char>(c);
        }
      }
      if (word.size() > 40) shown += "...";
      fail(ErrorKind::invalid_argument, where, ": '", shown, "' (id ", ids.size() + 1,
           ") is not a token id: expected a decimal integer in [0, 2147483647]");
    }
    ids.push_back(value);
    i = end;
  }
  return ids;
}

/// @}

}  // namespace dsv32
