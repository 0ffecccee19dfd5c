/// \file
/// \brief The pre-tokenizer pipeline: a sequence of `Split(Isolated)` regexes followed by
///        `ByteLevel`, which cuts text into the words that BPE merges independently.
///
/// For DeepSeek-V3 the pipeline is
/// 1. `\p{N}{1,3}` — digits in groups of at most three;
/// 2. `[一-龥぀-ゟ゠-ヿ]+` — runs of CJK ideographs, hiragana and katakana;
/// 3. a GPT-4-like word pattern (punctuation + letters, letters + marks, punctuation runs,
///    newlines, whitespace not followed by non-whitespace, whitespace);
/// 4. `ByteLevel` with `use_regex = false` (no further split) and `add_prefix_space = false`.
///
/// Each step is applied to each piece of the previous step separately (the regex sees only that
/// piece), exactly as in the reference implementation. The pipeline produces pieces as views of
/// the input without copying; the byte-to-unicode mapping of step 4 is folded into the BPE model
/// (see bpe_model.hpp), which therefore receives raw bytes.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dsv32/tokenizer/regex.hpp"

namespace dsv32::bpe {

/// \addtogroup tokenizer
/// @{

/// \brief The regex used by `ByteLevel` when `use_regex` is true (GPT-2's word pattern).
inline constexpr std::string_view byte_level_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// \brief Split steps followed by the final `ByteLevel` step.
class PreTokenizer {
 public:
  /// \param splits             the `Split(Isolated)` patterns, in order
  /// \param add_prefix_space   `ByteLevel.add_prefix_space`: prepend a space to every piece that
  ///                           does not start with one
  /// \param byte_level_regex   `ByteLevel.use_regex`: the regex ByteLevel splits with, if any
  PreTokenizer(std::vector<Regex> splits, bool add_prefix_space, std::optional<Regex> byte_level_regex)
      : splits_(std::move(splits)),
        add_prefix_space_(add_prefix_space),
        byte_level_regex_(std::move(byte_level_regex)) {}

  /// \brief Calls `on_piece(std::string_view)` for every non-empty piece of `text`, in order.
  ///        `text` must be valid UTF-8.
  template <class OnPiece>
  void pre_tokenize(std::string_view text, OnPiece&& on_piece) const {
    split_from(0, text, on_piece);
  }

  /// \brief Number of `Split` steps before `ByteLevel`.
  std::size_t split_count() const noexcept { return splits_.size(); }

 private:
  template <class OnPiece>
  void split_from(std::size_t step, std::string_view text, OnPiece& on_piece) const {
    if (step == splits_.size()) {
      byte_level(text, on_piece);
      return;
    }
    split_isolated(splits_[step], text, [&](std::size_t begin, std::size_t end) {
      split_from(step + 1, text.substr(begin, end - begin), on_piece);
    });
  }

  template <class OnPiece>
  void byte_level(std::string_view piece, OnPiece& on_piece) const {
    if (!add_prefix_space_ && !byte_level_regex_) {
      on_piece(piece);
      return;
    }
    std::string prefixed;
    if (add_prefix_space_ && piece.front() != ' ') {
      prefixed.reserve(piece.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(piece);
      piece = prefixed;
    }
    if (!byte_level_regex_) {
      on_piece(piece);
      return;
    }
    split_isolated(*byte_level_regex_, piece,
                   [&](std::size_t begin, std::size_t end) { on_piece(piece.substr(begin, end - begin)); });
  }

  std::vector<Regex> splits_;
  bool add_prefix_space_;
  std::optional<Regex> byte_level_regex_;
};

/// @}

}  // namespace dsv32::bpe
