/// \file
/// \brief The GPT-2 byte-to-unicode map used by the Hugging Face `ByteLevel` pre-tokenizer and
///        decoder.
///
/// Byte-level BPE works on bytes, but its vocabulary is stored as text. Each of the 256 byte
/// values is given a printable code point: the 188 bytes that are already printable Latin-1
/// (`!`..`~`, `¡`..`¬`, `®`..`ÿ`) stand for themselves, and the other 68 (controls, space, DEL,
/// NBSP, soft hyphen) are moved, in increasing byte order, to U+0100..U+0143 — so a space becomes
/// `Ġ` (U+0120) and a newline `Ċ` (U+010A).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "dsv32/tokenizer/utf8.hpp"

namespace dsv32::bpe {

/// \addtogroup tokenizer
/// @{

namespace detail {
constexpr bool byte_is_printable(unsigned b) noexcept {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}
}  // namespace detail

/// \brief Code point standing for each byte value: `byte_to_unicode_table[b]`.
inline constexpr std::array<char32_t, 256> byte_to_unicode_table = [] {
  std::array<char32_t, 256> table{};
  char32_t next = 0x100;
  for (unsigned b = 0; b < 256; ++b) table[b] = detail::byte_is_printable(b) ? char32_t(b) : next++;
  return table;
}();

/// \brief One past the largest code point in the image of the map (U+0143 + 1).
inline constexpr char32_t byte_level_code_point_end = 0x144;

/// \brief Inverse of the map over U+0000..U+0143: the byte a code point stands for, or -1.
inline constexpr std::array<std::int16_t, byte_level_code_point_end> unicode_to_byte_table = [] {
  std::array<std::int16_t, byte_level_code_point_end> table{};
  for (auto& v : table) v = -1;
  for (unsigned b = 0; b < 256; ++b) table[byte_to_unicode_table[b]] = static_cast<std::int16_t>(b);
  return table;
}();

/// \brief The code point standing for byte `b`.
constexpr char32_t byte_to_unicode(std::uint8_t b) noexcept { return byte_to_unicode_table[b]; }

/// \brief The byte that code point `c` stands for, or -1 when `c` is not in the map's image.
constexpr int unicode_to_byte(char32_t c) noexcept {
  return c < byte_level_code_point_end ? unicode_to_byte_table[c] : -1;
}

/// \brief The byte-level text of raw bytes: each byte replaced by the UTF-8 encoding of its code
///        point (this is what the vocabulary stores, e.g. `" the"` -> `"Ġthe"`).
inline std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8::append_code_point(out, byte_to_unicode(static_cast<std::uint8_t>(c)));
  return out;
}

/// \brief The raw bytes of a byte-level text, or nullopt when some character is not one of the
///        256 byte-level code points (as for `<｜User｜>`; the `ByteLevel` decoder then keeps
///        such a token's own UTF-8 bytes).
inline std::optional<std::string> byte_level_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const utf8::Sequence seq = utf8::inspect_sequence(text, i);
    if (seq.status != utf8::SequenceStatus::valid || seq.length > 2) return std::nullopt;
    char32_t cp = static_cast<unsigned char>(text[i]);
    if (seq.length == 2) cp = ((cp & 0x1F) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3F);
    const int b = unicode_to_byte(cp);
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
    i += seq.length;
  }
  return out;
}

/// @}

}  // namespace dsv32::bpe
