/// \file
/// \brief UTF-8 validation and lossy decoding with the exact replacement rules of Rust's
///        `String::from_utf8_lossy`, which the Hugging Face decoders use.
///
/// Token ids decode to bytes, and a byte-level BPE token may end in the middle of a multi-byte
/// character. Turning bytes back into text therefore needs one rule for bytes that do not form
/// UTF-8; this header implements the rule of the reference implementation ("substitution of
/// maximal subparts", Unicode 15 §3.9): every maximal invalid subpart becomes one U+FFFD. Because
/// the rule only looks at most three bytes ahead, the same functions serve whole-sequence decoding
/// and streaming decoding, which must agree byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace dsv32::utf8 {

/// \addtogroup tokenizer
/// @{

/// \brief What the bytes at one position of a string are.
enum class SequenceStatus {
  valid,      ///< a complete, well-formed UTF-8 sequence
  invalid,    ///< not UTF-8: `length` bytes form one maximal invalid subpart
  truncated,  ///< a well-formed prefix of a sequence cut off by the end of the input
};

/// \brief Result of inspect_sequence().
struct Sequence {
  SequenceStatus status;  ///< what the bytes are
  std::size_t length;  ///< bytes covered: the character, the invalid subpart, or the truncated prefix
};

/// \brief Classifies the bytes starting at `s[i]` (requires `i < s.size()`), following Table 3-7
///        of the Unicode standard (no overlongs, no surrogates, nothing above U+10FFFF).
constexpr Sequence inspect_sequence(std::string_view s, std::size_t i) noexcept {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {SequenceStatus::valid, 1};
  std::size_t continuation = 0;
  unsigned char lo = 0x80;  // allowed range of the second byte
  unsigned char hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    continuation = 1;
  } else if (b0 == 0xE0) {
    continuation = 2, lo = 0xA0;
  } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
    continuation = 2;
  } else if (b0 == 0xED) {
    continuation = 2, hi = 0x9F;
  } else if (b0 == 0xF0) {
    continuation = 3, lo = 0x90;
  } else if (b0 >= 0xF1 && b0 <= 0xF3) {
    continuation = 3;
  } else if (b0 == 0xF4) {
    continuation = 3, hi = 0x8F;
  } else {
    return {SequenceStatus::invalid, 1};
  }
  for (std::size_t k = 1; k <= continuation; ++k) {
    if (i + k >= s.size()) return {SequenceStatus::truncated, k};
    const auto b = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {SequenceStatus::invalid, k};
  }
  return {SequenceStatus::valid, continuation + 1};
}

/// \brief Offset of the first byte that does not start well-formed UTF-8 (including a sequence
///        truncated by the end of `s`), or `std::string_view::npos` when all of `s` is UTF-8.
constexpr std::size_t find_invalid(std::string_view s) noexcept {
  std::size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path: most text is mostly ASCII.
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Sequence seq = inspect_sequence(s, i);
    if (seq.status != SequenceStatus::valid) return i;
    i += seq.length;
  }
  return std::string_view::npos;
}

/// \brief Whether all of `s` is well-formed UTF-8.
constexpr bool is_valid(std::string_view s) noexcept { return find_invalid(s) == std::string_view::npos; }

/// \brief Number of bytes of the character starting at `s[i]` in valid UTF-8 (1 to 4).
constexpr std::size_t char_length(std::string_view s, std::size_t i) noexcept {
  const auto b = static_cast<unsigned char>(s[i]);
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

/// \brief Bytes at the end of `s` that start a UTF-8 character without finishing it (0 to 3): what
///        a streaming parser holds back so that its output is whole characters.
constexpr std::size_t truncated_tail_length(std::string_view s) noexcept {
  for (std::size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const std::size_t i = s.size() - back;
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      return inspect_sequence(s, i).status == SequenceStatus::truncated ? back : 0;
    }
  }
  return 0;
}

/// \brief Decodes the character at `s[i]` (requires `i < s.size()`): its code point and length, or
///        nullopt when the bytes there are not a complete UTF-8 character.
constexpr std::optional<std::pair<char32_t, std::size_t>> decode_at(std::string_view s, std::size_t i) noexcept {
  const Sequence seq = inspect_sequence(s, i);
  if (seq.status != SequenceStatus::valid) return std::nullopt;
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (seq.length == 1) return std::pair<char32_t, std::size_t>{b0, 1};
  char32_t cp = b0 & (seq.length == 2 ? 0x1F : seq.length == 3 ? 0x0F : 0x07);
  for (std::size_t k = 1; k < seq.length; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return std::pair<char32_t, std::size_t>{cp, seq.length};
}

/// \brief Appends the UTF-8 encoding of code point `cp` (which must be a Unicode scalar value).
inline void append_code_point(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

/// \brief U+FFFD REPLACEMENT CHARACTER, encoded.
inline constexpr std::string_view replacement_character = "\xEF\xBF\xBD";

/// \brief Appends `bytes` to `out`, replacing every maximal invalid subpart by U+FFFD.
///
/// With `final_chunk` false, a truncated sequence at the very end is not replaced but left
/// unconsumed, so that a streaming caller can complete it with the next bytes.
/// \returns the number of bytes of `bytes` consumed (all of them when `final_chunk` is true).
inline std::size_t append_lossy(std::string& out, std::string_view bytes, bool final_chunk = true) {
  std::size_t i = 0;
  std::size_t run_start = 0;  // start of the pending run of valid bytes, copied in one go
  while (i < bytes.size()) {
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const Sequence seq = inspect_sequence(bytes, i);
    if (seq.status == SequenceStatus::valid) {
      i += seq.length;
      continue;
    }
    out.append(bytes.substr(run_start, i - run_start));
    if (seq.status == SequenceStatus::truncated && !final_chunk) return i;
    out.append(replacement_character);
    i += seq.length;
    run_start = i;
  }
  out.append(bytes.substr(run_start));
  return bytes.size();
}

/// \brief `bytes` as text, with every maximal invalid subpart replaced by U+FFFD.
inline std::string decode_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  append_lossy(out, bytes, true);
  return out;
}

/// @}

}  // namespace dsv32::utf8
