/// \file
/// \brief Added tokens (`added_tokens` of tokenizer.json): control tokens such as
///        `<｜begin▁of▁sentence｜>` and `<｜User｜>` that are found in the text before
///        pre-tokenization and never split by BPE.
///
/// Matching follows the reference implementation's `AddedVocabulary`:
/// - tokens are found leftmost-longest (Aho-Corasick `LeftmostLongest`), non-overlapping;
/// - first the tokens with `normalized = false` are searched in the raw text, then the tokens with
///   `normalized = true` in the remaining pieces (after normalization, which is the identity for
///   the normalizers supported here);
/// - `single_word`: a match next to a word character (Unicode `\w`: Alphabetic, marks, decimal
///   digits, connector punctuation, join controls) is discarded — and the text it covered is not
///   searched again, as in the reference;
/// - `lstrip` / `rstrip`: the whitespace (Unicode White_Space) left / right of the match is
///   absorbed into the token.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dsv32/tokenizer/regex.hpp"
#include "dsv32/tokenizer/utf8.hpp"

namespace dsv32::bpe {

/// \addtogroup tokenizer
/// @{

/// \brief One entry of `added_tokens`.
struct AddedToken {
  std::int32_t id = 0;       ///< the token id
  std::string content;       ///< the text that is matched (and that the id decodes to)
  bool single_word = false;  ///< match only when not adjacent to word characters
  bool lstrip = false;       ///< absorb whitespace on the left
  bool rstrip = false;       ///< absorb whitespace on the right
  bool normalized = true;    ///< match against the normalized text (second pass)
  bool special = false;      ///< dropped by decode(..., skip_special_tokens = true)
};

/// \brief Finds added tokens in text.
class AddedVocabulary {
 public:
  /// \brief No added tokens.
  AddedVocabulary() = default;

  /// \param tokens the added tokens; contents must be non-empty and distinct
  explicit AddedVocabulary(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
    bool needs_classes = false;
    for (std::size_t i = 0; i < tokens_.size(); ++i) {
      (tokens_[i].normalized ? normalized_ : raw_).add(tokens_[i].content, static_cast<std::int32_t>(i));
      needs_classes |= tokens_[i].single_word || tokens_[i].lstrip || tokens_[i].rstrip;
    }
    if (needs_classes) {
      word_char_.emplace(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])", Regex::Syntax::pcre2,
                         "added token word characters");
      space_char_.emplace(R"(\p{White_Space})", Regex::Syntax::pcre2, "added token whitespace");
    }
  }

  /// \brief Splits `text` (valid UTF-8) into plain text and added tokens, in order:
  ///        `on_text(std::string_view)` for each non-empty stretch of plain text,
  ///        `on_token(const AddedToken&)` for each added token found.
  template <class OnText, class OnToken>
  void split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
    split_with(raw_, text, [&](std::string_view plain) {
      split_with(normalized_, plain, on_text, on_token);
    }, on_token);
  }

  /// \brief The added tokens, in file order.
  const std::vector<AddedToken>& tokens() const noexcept { return tokens_; }

 private:
  /// A byte trie of token contents with a first-byte filter; finds the longest token starting at
  /// a position. Tokens are few (hundreds) and the filter rejects almost every position.
  class Trie {
   public:
    void add(std::string_view content, std::int32_t token) {
      std::int32_t node = 0;
      for (char c : content) {
        const auto b = static_cast<unsigned char>(c);
        std::int32_t child = find_child(node, b);
        if (child < 0) {
          child = static_cast<std::int32_t>(nodes_.size());
          nodes_.push_back({});
          nodes_[node].children.push_back({b, child});
        }
        node = child;
      }
      nodes_[node].token = token;
      first_byte_[static_cast<unsigned char>(content.front())] = true;
      empty_ = false;
    }

    /// Leftmost-longest match at or after `from`: (begin, end, token index) or nullopt.
    std::optional<std::array<std::size_t, 3>> find(std::string_view text, std::size_t from) const {
      if (empty_) return std::nullopt;
      for (std::size_t i = from; i < text.size(); ++i) {
        if (!first_byte_[static_cast<unsigned char>(text[i])]) continue;
        std::int32_t node = 0;
        std::int32_t best = -1;
        std::size_t best_end = 0;
        for (std::size_t j = i; j < text.size(); ++j) {
          node = find_child(node, static_cast<unsigned char>(text[j]));
          if (node < 0) break;
          if (nodes_[node].token >= 0) best = nodes_[node].token, best_end = j + 1;
        }
        if (best >= 0) return std::array<std::size_t, 3>{i, best_end, static_cast<std::size_t>(best)};
      }
      return std::nullopt;
    }

   private:
    struct Node {
      std::vector<std::pair<unsigned char, std::int32_t>> children;
      std::int32_t token = -1;
    };
    std::int32_t find_child(std::int32_t node, unsigned char b) const {
      for (const auto& [byte, child] : nodes_[node].children) {
        if (byte == b) return child;
      }
      return -1;
    }
    std::vector<Node> nodes_{Node{}};
    std::array<bool, 256> first_byte_{};
    bool empty_ = true;
  };

  template <class OnText, class OnToken>
  void split_with(const Trie& trie, std::string_view text, OnText&& on_text, OnToken&& on_token) const {
    std::size_t emitted = 0;  // end of what has been passed on
    std::size_t search = 0;
    while (auto found = trie.find(text, search)) {
      auto [begin, end, index] = *found;
      search = end;
      const AddedToken& token = tokens_[index];
      if (begin < emitted) continue;  // inside whitespace an earlier token absorbed with rstrip
      if (token.single_word && !(is_word_boundary_before(text, begin) && is_word_boundary_after(text, end))) {
        continue;
      }
      if (token.lstrip) begin = std::max(whitespace_run_start(text, begin), emitted);
      if (token.rstrip) {
        end = whitespace_run_end(text, end);
        search = end;
      }
      if (emitted < begin) on_text(text.substr(emitted, begin - emitted));
      on_token(token);
      emitted = end;
    }
    if (emitted < text.size()) on_text(text.substr(emitted));
  }

  // Byte offset where the character that ends at `end` starts.
  static std::size_t previous_char(std::string_view text, std::size_t end) {
    std::size_t i = end - 1;
    while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
    return i;
  }
  bool char_matches(const Regex& cls, std::string_view text, std::size_t at) const {
    const std::string_view ch = text.substr(at, utf8::char_length(text, at));
    std::size_t b = 0;
    std::size_t e = 0;
    return cls.find(ch, 0, b, e) && b == 0 && e == ch.size();
  }
  bool is_word_boundary_before(std::string_view text, std::size_t begin) const {
    return begin == 0 || !char_matches(*word_char_, text, previous_char(text, begin));
  }
  bool is_word_boundary_after(std::string_view text, std::size_t end) const {
    return end == text.size() || !char_matches(*word_char_, text, end);
  }
  std::size_t whitespace_run_start(std::string_view text, std::size_t begin) const {
    while (begin > 0) {
      const std::size_t p = previous_char(text, begin);
      if (!char_matches(*space_char_, text, p)) break;
      begin = p;
    }
    return begin;
  }
  std::size_t whitespace_run_end(std::string_view text, std::size_t end) const {
    while (end < text.size() && char_matches(*space_char_, text, end)) end += utf8::char_length(text, end);
    return end;
  }

  std::vector<AddedToken> tokens_;
  Trie raw_;
  Trie normalized_;
  std::optional<Regex> word_char_;
  std::optional<Regex> space_char_;
};

/// @}

}  // namespace dsv32::bpe
