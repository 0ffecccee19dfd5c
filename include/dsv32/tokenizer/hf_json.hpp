/// \file
/// \brief Reading Hugging Face `tokenizer.json` and `tokenizer_config.json` into the tokenizer's
///        components, with errors that name the file, the field, what was expected and what was
///        found.
///
/// Only what this library implements is accepted; everything else is refused with
/// Error(unsupported) rather than approximated:
/// - `normalizer`: null or an empty `Sequence` (identity);
/// - `pre_tokenizer`: `Split` steps (`behavior` "Isolated", `{"Regex"}` or `{"String"}` pattern),
///   possibly inside `Sequence`s, ending with one `ByteLevel`;
/// - `model`: `BPE` with `dropout` null/0, no `continuing_subword_prefix`/`end_of_word_suffix`,
///   a vocabulary holding all 256 byte-level characters (so `unk_token`, `fuse_unk` and
///   `byte_fallback` can never take effect and any value is accepted), `ignore_merges` either way;
/// - `decoder`: `ByteLevel`; `post_processor`: null or `ByteLevel` (neither changes ids);
/// - `truncation` and `padding`: null.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv32/core/error.hpp"
#include "dsv32/core/json.hpp"
#include "dsv32/tokenizer/added_vocabulary.hpp"
#include "dsv32/tokenizer/bpe_model.hpp"
#include "dsv32/tokenizer/pre_tokenizer.hpp"
#include "dsv32/tokenizer/regex.hpp"

namespace dsv32::bpe {

/// \addtogroup tokenizer
/// @{

/// \brief Reads and parses a JSON file strictly (parse_json_strict(): no key twice in one object,
///        nesting at most kMaxJsonDepth deep, so that the recursive checks below stay shallow).
/// \throws Error(io) when it is missing, not a regular file (a directory reads as nothing) or
///         unreadable, Error(invalid_file) when it is not such JSON.
inline nlohmann::json read_json_file(const std::filesystem::path& path) {
  return read_json_file_strict(path, ErrorKind::invalid_file);
}

/// \brief A JSON value together with where it is (file and field path), for error messages.
class JsonNode {
 public:
  /// \param value the value
  /// \param file  the file it was read from
  /// \param path  the field path inside the file, e.g. `model.vocab` (empty for the top level)
  JsonNode(const nlohmann::json& value, std::string file, std::string path = {})
      : value_(&value), file_(std::move(file)), path_(std::move(path)) {}

  /// \brief The value.
  const nlohmann::json& value() const noexcept { return *value_; }

  /// \brief The file the value was read from.
  const std::string& file() const noexcept { return file_; }

  /// \brief `file: path` as used at the start of messages.
  std::string where() const { return file_ + ": " + (path_.empty() ? std::string("top level") : path_); }

  /// \brief Short description of the value for "found ..." in messages.
  static std::string describe(const nlohmann::json& v) {
    if (v.is_string()) {
      std::string s = v.get<std::string>();
      if (s.size() > 60) s = s.substr(0, 57) + "...";
      return "string " + nlohmann::json(s).dump();
    }
    if (v.is_number() || v.is_boolean()) return std::string(v.type_name()) + " " + v.dump();
    return v.type_name();
  }

  /// \brief Throws Error(invalid_file): "<where>: expected <what>, found <value>".
  [[noreturn]] void expected(std::string_view what) const {
    fail(ErrorKind::invalid_file, where(), ": expected ", what, ", found ", describe(*value_));
  }

  /// \brief Throws Error(unsupported): "<where>: <what>".
  template <class... Args>
  [[noreturn]] void unsupported(Args&&... what) const {
    fail(ErrorKind::unsupported, where(), ": ", std::forward<Args>(what)...);
  }

  /// \brief The object member `key`, which must exist.
  JsonNode at(std::string_view key) const {
    std::optional<JsonNode> child = get(key);
    if (!child) fail(ErrorKind::invalid_file, where(), ": missing field \"", key, "\"");
    return *child;
  }

  /// \brief The object member `key`, or nullopt when absent (a JSON null is returned as such).
  std::optional<JsonNode> get(std::string_view key) const {
    if (!value_->is_object()) expected("an object");
    const auto it = value_->find(key);
    if (it == value_->end()) return std::nullopt;
    return JsonNode(*it, file_, path_.empty() ? std::string(key) : path_ + "." + std::string(key));
  }

  /// \brief Element `i` of an array.
  JsonNode operator[](std::size_t i) const {
    return JsonNode((*value_)[i], file_, path_ + "[" + std::to_string(i) + "]");
  }

  /// \brief Whether the value is JSON null.
  bool is_null() const noexcept { return value_->is_null(); }

  /// \brief Number of elements; the value must be an array.
  std::size_t array_size() const {
    if (!value_->is_array()) expected("an array");
    return value_->size();
  }

  /// \brief The value, which must be a string.
  std::string string() const {
    if (!value_->is_string()) expected("a string");
    return value_->get<std::string>();
  }

  /// \brief The value, which must be true or false.
  bool boolean() const {
    if (!value_->is_boolean()) expected("true or false");
    return value_->get<bool>();
  }

  /// \brief A token id: an integer in [0, 2^31 - 1).
  std::int32_t token_id() const {
    if (!is_token_id(*value_)) expected("a token id (integer in [0, 2147483647))");
    return static_cast<std::int32_t>(value_->get<std::int64_t>());
  }

  /// \brief Whether `v` is an integer in [0, 2^31 - 1).
  static bool is_token_id(const nlohmann::json& v) noexcept {
    if (v.is_number_unsigned()) return v.get<std::uint64_t>() < 0x7fffffffULL;
    return v.is_number_integer() && v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() < 0x7fffffff;
  }

  /// \brief The boolean member `key`, or `fallback` when absent.
  bool boolean_or(std::string_view key, bool fallback) const {
    const std::optional<JsonNode> child = get(key);
    return child ? child->boolean() : fallback;
  }

  /// \brief The string member `type`, which every component object has.
  std::string type() const { return at("type").string(); }

 private:
  const nlohmann::json* value_;
  std::string file_;
  std::string path_;
};

/// \brief Checks `normalizer`: null or (nested) empty `Sequence`s.
/// \param normalizer the `normalizer` value
/// \param depth      how deep inside other Sequences it is (the recursion is bounded: a document
///                   built in memory has not been through read_json_file()'s depth limit)
inline void check_normalizer(const JsonNode& normalizer, int depth = 0) {
  if (normalizer.is_null()) return;
  if (depth >= kMaxJsonDepth) normalizer.unsupported("normalizer Sequences nested deeper than ", kMaxJsonDepth, " levels");
  const std::string type = normalizer.type();
  if (type != "Sequence") {
    normalizer.unsupported("normalizer type \"", type, "\" is not supported (only none or an empty Sequence)");
  }
  const JsonNode list = normalizer.at("normalizers");
  for (std::size_t i = 0; i < list.array_size(); ++i) check_normalizer(list[i], depth + 1);
}

namespace detail {
inline void flatten_pre_tokenizers(const JsonNode& node, std::vector<JsonNode>& steps, int depth = 0) {
  if (node.type() == "Sequence") {
    if (depth >= kMaxJsonDepth) node.unsupported("pre_tokenizer Sequences nested deeper than ", kMaxJsonDepth, " levels");
    const JsonNode list = node.at("pretokenizers");
    for (std::size_t i = 0; i < list.array_size(); ++i) flatten_pre_tokenizers(list[i], steps, depth + 1);
  } else {
    steps.push_back(node);
  }
}
}  // namespace detail

/// \brief Builds the pre-tokenizer from `pre_tokenizer`.
inline PreTokenizer parse_pre_tokenizer(const JsonNode& node) {
  if (node.is_null()) {
    node.unsupported("no pre_tokenizer; byte-level BPE needs a final ByteLevel pre-tokenizer");
  }
  std::vector<JsonNode> steps;
  detail::flatten_pre_tokenizers(node, steps);
  std::vector<Regex> splits;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const JsonNode& step = steps[i];
    const std::string type = step.type();
    if (type == "Split") {
      const std::string behavior = step.at("behavior").string();
      if (behavior != "Isolated") {
        step.unsupported("Split behavior \"", behavior, "\" is not supported (only \"Isolated\")");
      }
      // `invert` swaps which pieces are matches; with Isolated every piece stands alone either way.
      if (const auto invert = step.get("invert")) invert->boolean();
      const JsonNode pattern = step.at("pattern");
      if (const auto regex = pattern.get("Regex")) {
        splits.emplace_back(regex->string(), Regex::Syntax::oniguruma, regex->where());
      } else if (const auto literal = pattern.get("String")) {
        splits.emplace_back(literal->string(), Regex::Syntax::literal, literal->where());
      } else {
        pattern.expected("an object with a \"Regex\" or \"String\" field");
      }
    } else if (type == "ByteLevel") {
      if (i + 1 != steps.size()) {
        step.unsupported("ByteLevel must be the last pre-tokenizer (", steps.size() - i - 1, " step(s) follow it)");
      }
      const bool add_prefix_space = step.at("add_prefix_space").boolean();
      std::optional<Regex> byte_level_regex;
      if (step.boolean_or("use_regex", true)) {
        byte_level_regex.emplace(byte_level_pattern, Regex::Syntax::oniguruma, step.where() + " (ByteLevel regex)");
      }
      return PreTokenizer(std::move(splits), add_prefix_space, std::move(byte_level_regex));
    } else {
      step.unsupported("pre-tokenizer type \"", type, "\" is not supported (only Sequence, Split, ByteLevel)");
    }
  }
  node.unsupported("no ByteLevel pre-tokenizer; byte-level BPE needs one as the last step");
}

/// \brief Checks `decoder`: must be `ByteLevel`.
inline void check_decoder(const JsonNode& decoder) {
  if (decoder.is_null()) decoder.unsupported("no decoder; expected a ByteLevel decoder");
  const std::string type = decoder.type();
  if (type != "ByteLevel") decoder.unsupported("decoder type \"", type, "\" is not supported (only ByteLevel)");
}

/// \brief Checks `post_processor`: null or `ByteLevel` (which only adjusts offsets).
inline void check_post_processor(const JsonNode& post_processor) {
  if (post_processor.is_null()) return;
  const std::string type = post_processor.type();
  if (type != "ByteLevel") {
    post_processor.unsupported("post_processor type \"", type,
                               "\" is not supported (only none or ByteLevel; BOS/EOS come from "
                               "tokenizer_config.json add_bos_token/add_eos_token)");
  }
}

/// \brief Reads `added_tokens`.
inline std::vector<AddedToken> parse_added_tokens(const JsonNode& list) {
  std::vector<AddedToken> tokens;
  const std::size_t n = list.array_size();
  tokens.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const JsonNode entry = list[i];
    AddedToken t;
    t.id = entry.at("id").token_id();
    t.content = entry.at("content").string();
    if (t.content.empty()) entry.at("content").expected("a non-empty string");
    if (!utf8::is_valid(t.content)) entry.at("content").expected("valid UTF-8");
    t.special = entry.boolean_or("special", false);
    t.single_word = entry.boolean_or("single_word", false);
    t.lstrip = entry.boolean_or("lstrip", false);
    t.rstrip = entry.boolean_or("rstrip", false);
    t.normalized = entry.boolean_or("normalized", !t.special);
    tokens.push_back(std::move(t));
  }
  return tokens;
}

/// \brief Reads `model` (type BPE): its vocabulary and merges.
/// \param model          the `model` object
/// \param cache_capacity word cache size for the model
inline std::unique_ptr<BpeModel> parse_bpe_model(const JsonNode& model, std::size_t cache_capacity) {
  const std::optional<JsonNode> type = model.get("type");
  if (type && type->string() != "BPE") {
    type->unsupported("model type \"", type->string(), "\" is not supported (only BPE)");
  }
  if (const auto dropout = model.get("dropout"); dropout && !dropout->is_null()) {
    if (!dropout->value().is_number()) dropout->expected("null or a number");
    if (dropout->value().get<double>() != 0.0) dropout->unsupported("BPE dropout is not supported (must be null or 0)");
  }
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const auto field = model.get(affix); field && !field->is_null() && !field->string().empty()) {
      field->unsupported("is not supported (must be null for byte-level BPE)");
    }
  }
  for (const char* flag : {"fuse_unk", "byte_fallback"}) {
    if (const auto field = model.get(flag); field && !field->is_null()) field->boolean();
  }
  BpeModel::Options options;
  options.ignore_merges = model.boolean_or("ignore_merges", false);
  options.cache_capacity = cache_capacity;

  const JsonNode vocab_node = model.at("vocab");
  if (!vocab_node.value().is_object()) vocab_node.expected("an object mapping token text to id");
  Vocabulary vocab;
  vocab.reserve(vocab_node.value().size());
  std::unordered_map<std::int32_t, std::string> seen_ids;
  for (const auto& [text, id_value] : vocab_node.value().items()) {
    if (!JsonNode::is_token_id(id_value)) {
      fail(ErrorKind::invalid_file, vocab_node.where(), "[", nlohmann::json(text).dump(),
           "]: expected a token id (integer in [0, 2147483647)), found ", JsonNode::describe(id_value));
    }
    const auto id = static_cast<std::int32_t>(id_value.get<std::int64_t>());
    if (const auto [it, inserted] = seen_ids.emplace(id, text); !inserted) {
      fail(ErrorKind::invalid_file, vocab_node.where(), ": id ", id, " is given to both ",
           nlohmann::json(it->second).dump(), " and ", nlohmann::json(text).dump());
    }
    vocab.emplace(text, id);
  }

  const JsonNode merges_node = model.at("merges");
  const std::size_t n = merges_node.array_size();
  std::vector<MergeRule> merges;
  merges.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const nlohmann::json& m = merges_node.value()[i];
    if (m.is_string()) {  // "left right", split on the one space
      const std::string& s = m.get_ref<const std::string&>();
      const std::size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        merges_node[i].expected("\"left right\" (two tokens separated by one space)");
      }
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      merges_node[i].expected("a merge: \"left right\" or [\"left\", \"right\"]");
    }
  }
  auto bpe = std::make_unique<BpeModel>(std::move(vocab), merges, options, model.file());
  if (const auto unk = model.get("unk_token"); unk && !unk->is_null()) {
    if (!bpe->token_to_id(unk->string())) {
      fail(ErrorKind::invalid_file, unk->where(), ": unk_token \"", unk->string(), "\" is not in model.vocab");
    }
  }
  return bpe;
}

/// \brief What this library reads from `tokenizer_config.json`.
struct TokenizerConfig {
  bool add_bos_token = false;                ///< prepend bos when encoding with special tokens
  bool add_eos_token = false;                ///< append eos when encoding with special tokens
  std::optional<std::string> bos_token;      ///< content of `bos_token`
  std::optional<std::string> eos_token;      ///< content of `eos_token`
  std::optional<std::string> pad_token;      ///< content of `pad_token`
  std::optional<std::string> chat_template;  ///< `chat_template` text (the "default" one of a list)
};

/// \brief Reads `tokenizer_config.json`. Fields not listed in TokenizerConfig are ignored.
inline TokenizerConfig parse_tokenizer_config(const JsonNode& config) {
  if (!config.value().is_object()) config.expected("an object");
  TokenizerConfig out;
  out.add_bos_token = config.boolean_or("add_bos_token", false);
  out.add_eos_token = config.boolean_or("add_eos_token", false);
  auto special_token = [&](std::string_view key) -> std::optional<std::string> {
    const std::optional<JsonNode> node = config.get(key);
    if (!node || node->is_null()) return std::nullopt;
    if (node->value().is_string()) return node->string();
    if (node->value().is_object()) return node->at("content").string();  // {"__type": "AddedToken", ...}
    node->expected("null, a string or an AddedToken object");
  };
  out.bos_token = special_token("bos_token");
  out.eos_token = special_token("eos_token");
  out.pad_token = special_token("pad_token");
  if (const auto tmpl = config.get("chat_template"); tmpl && !tmpl->is_null()) {
    if (tmpl->value().is_string()) {
      out.chat_template = tmpl->string();
    } else if (tmpl->value().is_array()) {  // [{"name": "default", "template": "..."}, ...]
      for (std::size_t i = 0; i < tmpl->array_size(); ++i) {
        if ((*tmpl)[i].at("name").string() == "default") out.chat_template = (*tmpl)[i].at("template").string();
      }
    } else {
      tmpl->expected("a string or a list of named templates");
    }
  }
  return out;
}

/// @}

}  // namespace dsv32::bpe
