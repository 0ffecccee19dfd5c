/// \file
/// \brief dsv32::Tokenizer — text to token ids and back, as the Hugging Face `tokenizers` library
///        does for DeepSeek's `tokenizer.json` (V3, V3.2-Exp) — and dsv32::StreamDecoder for streaming output.
///
/// Encoding runs: UTF-8 check -> added tokens (bos, `<｜User｜>`, ...) cut out of the text ->
/// pre-tokenizer regex splits -> byte-level BPE per piece. Decoding maps each id to its bytes
/// (byte-level tokens back to raw bytes, other tokens as their own text) and turns the bytes into
/// UTF-8 text, replacing what is not UTF-8 by U+FFFD.
///
/// A Tokenizer is immutable after loading, cheap to copy (copies share the loaded tables) and safe
/// to use from several threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv32/core/error.hpp"
#include "dsv32/core/filesystem.hpp"
#include "dsv32/tokenizer/added_vocabulary.hpp"
#include "dsv32/tokenizer/bpe_model.hpp"
#include "dsv32/tokenizer/byte_level.hpp"
#include "dsv32/tokenizer/chat_format.hpp"
#include "dsv32/tokenizer/chat_template.hpp"
#include "dsv32/tokenizer/hf_json.hpp"
#include "dsv32/tokenizer/pre_tokenizer.hpp"
#include "dsv32/tokenizer/utf8.hpp"

namespace dsv32 {

/// \addtogroup tokenizer
/// @{

/// \brief Settings chosen by the caller when loading a tokenizer.
struct TokenizerOptions {
  /// Entries of the BPE word cache, which each encoding thread keeps for itself (64 bytes each,
  /// so the default is 1 MiB per thread; 0 disables the cache).
  std::size_t cache_capacity = 16384;
  /// Refuse apply_chat_template() unless tokenizer_config.json holds exactly one of the templates
  /// implemented by ChatTemplate (DeepSeek-V3.2-Exp's or DeepSeek-V3's). Set to false to render an
  /// unknown or missing template with the rules of fallback_chat_template instead.
  bool require_known_chat_template = true;
  /// The rules apply_chat_template() uses when the file's template is not recognized and
  /// require_known_chat_template is false (a recognized template always uses its own rules).
  ChatTemplateKind fallback_chat_template = ChatTemplateKind::deepseek_v3_2_exp;
  /// The chat format of these files (Tokenizer::chat_format()), when the caller knows it; by
  /// default it is detected: a recognized template gives its model's format, a
  /// tokenizer_config.json without a template (or, for from_directory(), an `encoding/` folder
  /// beside it) DeepSeek-V3.2's.
  std::optional<ChatFormat> chat_format{};
};

namespace detail {

/// Everything a loaded tokenizer holds; shared, immutable (except the BPE cache, which locks).
struct TokenizerCore {
  bpe::AddedVocabulary added;
  std::optional<bpe::PreTokenizer> pre_tokenizer;
  std::unique_ptr<bpe::BpeModel> model;

  // Per id in [0, vocab_size): the token text, its decoded bytes, and flags.
  std::vector<std::string> token_text;
  std::string decoded_bytes;               // all ids' decoded bytes, concatenated
  std::vector<std::uint32_t> decoded_end;  // id -> end offset in decoded_bytes (start = previous end)
  std::vector<std::uint8_t> flags;         // id -> flag bits below
  static constexpr std::uint8_t known = 1;
  static constexpr std::uint8_t special = 2;

  std::unordered_map<std::string, std::int32_t, bpe::StringHash, std::equal_to<>> added_ids;

  bpe::TokenizerConfig config;
  std::optional<std::int32_t> bos_id;
  std::optional<std::int32_t> eos_id;
  std::optional<std::int32_t> pad_id;
  ChatTemplate chat_template;
  std::optional<ChatTemplateKind> chat_template_kind;  // the file's template, when recognized
  std::optional<ChatFormat> chat_format;               // chosen by the caller, or detected
  bool require_known_chat_template = true;

  std::string_view decoded(std::int32_t id) const noexcept {
    const std::uint32_t begin = id == 0 ? 0 : decoded_end[static_cast<std::size_t>(id) - 1];
    return std::string_view(decoded_bytes).substr(begin, decoded_end[static_cast<std::size_t>(id)] - begin);
  }

  bool is_known(std::int32_t id) const noexcept {
    return id >= 0 && static_cast<std::size_t>(id) < flags.size() && (flags[static_cast<std::size_t>(id)] & known);
  }

  /// Throws unless `id` has a token; `what` and `position` locate it in the message.
  void check_id(std::int32_t id, const char* what, std::size_t position) const {
    if (is_known(id)) return;
    if (id < 0 || static_cast<std::size_t>(id) >= flags.size()) {
      fail(ErrorKind::invalid_argument, what, ": token id ", id, " at position ", position,
           " is outside the tokenizer's vocabulary [0, ", flags.size(), ")");
    }
    fail(ErrorKind::invalid_argument, what, ": token id ", id, " at position ", position,
         " has no token in the tokenizer's vocabulary [0, ", flags.size(), ")");
  }

  std::optional<std::int32_t> token_to_id(std::string_view token) const {
    if (const auto it = added_ids.find(token); it != added_ids.end()) return it->second;
    return model->token_to_id(token);
  }
};

inline std::shared_ptr<const TokenizerCore> build_tokenizer_core(const nlohmann::json& tokenizer_json,
                                                                 const std::string& tokenizer_file,
                                                                 const nlohmann::json& config_json,
                                                                 const std::string& config_file,
                                                                 const TokenizerOptions& options) {
  using bpe::JsonNode;
  auto core = std::make_shared<TokenizerCore>();
  const JsonNode root(tokenizer_json, tokenizer_file);
  if (!tokenizer_json.is_object()) root.expected("an object");

  for (const char* field : {"truncation", "padding"}) {
    if (const auto node = root.get(field); node && !node->is_null()) {
      node->unsupported("is not supported (must be null)");
    }
  }
  if (const auto normalizer = root.get("normalizer")) bpe::check_normalizer(*normalizer);
  core->pre_tokenizer.emplace(bpe::parse_pre_tokenizer(root.at("pre_tokenizer")));
  bpe::check_decoder(root.at("decoder"));
  if (const auto post = root.get("post_processor")) bpe::check_post_processor(*post);
  core->model = bpe::parse_bpe_model(root.at("model"), options.cache_capacity);

  std::vector<bpe::AddedToken> added;
  if (const auto node = root.get("added_tokens")) added = bpe::parse_added_tokens(*node);

  // The reference implementation does not take added-token ids from the file: it gives each one,
  // in file order, its model.vocab id if it has one, else the next id after the vocabulary and
  // the added tokens so far (AddedVocabulary::add_tokens), and only warns when that differs from
  // the file. A file whose ids differ would therefore encode differently from what it says;
  // refuse it instead of choosing silently.
  {
    const auto model_size = static_cast<std::int64_t>(core->model->vocabulary().size());
    std::int64_t max_added = -1;
    std::unordered_map<std::string_view, std::size_t> seen;
    for (std::size_t i = 0; i < added.size(); ++i) {
      if (const auto [it, inserted] = seen.emplace(added[i].content, i); !inserted) {
        fail(ErrorKind::invalid_file, tokenizer_file, ": added_tokens[", i, "]: token \"", added[i].content,
             "\" is already added_tokens[", it->second, "]");
      }
      const std::optional<std::int32_t> vocab_id = core->model->token_to_id(added[i].content);
      std::int64_t expected = 0;
      if (vocab_id) {
        expected = *vocab_id;
      } else if (max_added < 0) {
        expected = model_size;
      } else {
        expected = max_added >= model_size || model_size == 0 ? max_added + 1 : model_size;
      }
      max_added = std::max(max_added, expected);
      if (added[i].id != expected) {
        fail(ErrorKind::invalid_file, tokenizer_file, ": added_tokens[", i, "]: token \"", added[i].content,
             "\" has id ", added[i].id, ", but the reference implementation assigns it id ", expected,
             vocab_id ? " (its id in model.vocab)" : " (added tokens not in model.vocab follow on after it)");
      }
    }
  }

  // id -> text: the model's vocabulary, then the added tokens (which take precedence, as in the
  // reference's id_to_token), checking that the two agree where they overlap.
  std::int32_t max_id = -1;
  for (const auto& [text, id] : core->model->vocabulary()) max_id = std::max(max_id, id);
  for (const auto& t : added) max_id = std::max(max_id, t.id);
  const auto vocab_size = static_cast<std::size_t>(max_id + 1);
  // Tables are indexed by id; a file with a few huge ids must not make them enormous.
  const std::size_t token_count = core->model->vocabulary().size() + added.size();
  if (vocab_size > 2 * token_count + 65536) {
    fail(ErrorKind::invalid_file, tokenizer_file, ": token ids are too sparse: the largest is ", max_id, " for ",
         token_count, " tokens");
  }
  core->token_text.assign(vocab_size, {});
  core->flags.assign(vocab_size, 0);
  for (const auto& [text, id] : core->model->vocabulary()) {
    core->token_text[static_cast<std::size_t>(id)] = text;
    core->flags[static_cast<std::size_t>(id)] = TokenizerCore::known;
  }
  for (std::size_t i = 0; i < added.size(); ++i) {
    const bpe::AddedToken& t = added[i];
    const auto where = [&] { return tokenizer_file + ": added_tokens[" + std::to_string(i) + "]"; };
    auto& slot = core->token_text[static_cast<std::size_t>(t.id)];
    const bool in_vocab = core->flags[static_cast<std::size_t>(t.id)] & TokenizerCore::known;
    if (in_vocab && slot != t.content) {
      fail(ErrorKind::invalid_file, where(), ": id ", t.id, " of \"", t.content, "\" belongs to \"", slot,
           "\" in model.vocab");
    }
    core->added_ids.emplace(t.content, t.id);
    slot = t.content;
    core->flags[static_cast<std::size_t>(t.id)] =
        TokenizerCore::known | (t.special ? TokenizerCore::special : std::uint8_t{0});
  }
  core->added = bpe::AddedVocabulary(std::move(added));

  // The ByteLevel decoder turns a token into raw bytes when all its characters are byte-level
  // characters, and keeps its UTF-8 text otherwise (as for "<｜User｜>").
  core->decoded_end.resize(vocab_size);
  for (std::size_t id = 0; id < vocab_size; ++id) {
    const std::string& text = core->token_text[id];
    if (std::optional<std::string> bytes = bpe::byte_level_decode(text)) {
      core->decoded_bytes += *bytes;
    } else {
      core->decoded_bytes += text;
    }
    core->decoded_end[id] = static_cast<std::uint32_t>(core->decoded_bytes.size());
  }

  // tokenizer_config.json
  const JsonNode config_root(config_json, config_file);
  core->config = bpe::parse_tokenizer_config(config_root);
  auto resolve = [&](const std::optional<std::string>& content, const char* field) -> std::optional<std::int32_t> {
    if (!content) return std::nullopt;
    const std::optional<std::int32_t> id = core->token_to_id(*content);
    if (!id) {
      fail(ErrorKind::invalid_file, config_file, ": ", field, ": \"", *content, "\" is not a token of ",
           tokenizer_file);
    }
    return id;
  };
  core->bos_id = resolve(core->config.bos_token, "bos_token");
  core->eos_id = resolve(core->config.eos_token, "eos_token");
  core->pad_id = resolve(core->config.pad_token, "pad_token");
  if (core->config.add_bos_token && !core->bos_id) {
    fail(ErrorKind::invalid_file, config_file, ": add_bos_token is true but there is no bos_token");
  }
  if (core->config.add_eos_token && !core->eos_id) {
    fail(ErrorKind::invalid_file, config_file, ": add_eos_token is true but there is no eos_token");
  }
  if (core->config.chat_template) core->chat_template_kind = ChatTemplate::recognize(*core->config.chat_template);
  core->chat_template = ChatTemplate(core->chat_template_kind.value_or(options.fallback_chat_template),
                                     core->config.bos_token.value_or(""));
  core->require_known_chat_template = options.require_known_chat_template;
  if (options.chat_format) {
    core->chat_format = options.chat_format;
  } else if (core->chat_template_kind) {
    core->chat_format = *core->chat_template_kind == ChatTemplateKind::deepseek_v3 ? ChatFormat::deepseek_v3
                                                                                  : ChatFormat::deepseek_v3_2_exp;
  } else if (!core->config.chat_template) {
    core->chat_format = ChatFormat::deepseek_v3_2;  // DeepSeek-V3.2 ships its encoding as Python, no template
  }
  return core;
}

}  // namespace detail

class StreamDecoder;

/// \brief A byte-level BPE tokenizer loaded from Hugging Face tokenizer files.
class Tokenizer {
 public:
  /// \brief Loads `tokenizer.json` and `tokenizer_config.json` from a directory.
  /// \throws Error(io) when a file cannot be read; Error(invalid_file) when one is malformed;
  ///         Error(unsupported) when it asks for something this library does not implement.
  /// DeepSeek-V3.2's directory holds the encoding module in `encoding/`: its chat format is then
  /// ChatFormat::deepseek_v3_2 (unless TokenizerOptions::chat_format says otherwise).
  static Tokenizer from_directory(const std::filesystem::path& directory, const TokenizerOptions& options = {}) {
    TokenizerOptions chosen = options;
    if (!chosen.chat_format && dsv32::detail::path_is_directory(directory / "encoding")) {
      chosen.chat_format = ChatFormat::deepseek_v3_2;
    }
    return from_files(directory / "tokenizer.json", directory / "tokenizer_config.json", chosen);
  }

  /// \brief Loads the two files given by path (errors as from_directory()).
  static Tokenizer from_files(const std::filesystem::path& tokenizer_json,
                              const std::filesystem::path& tokenizer_config_json,
                              const TokenizerOptions& options = {}) {
    const nlohmann::json tokenizer = bpe::read_json_file(tokenizer_json);
    const nlohmann::json config = bpe::read_json_file(tokenizer_config_json);
    return from_json(tokenizer, config, options, tokenizer_json.string(), tokenizer_config_json.string());
  }

  /// \brief Builds a tokenizer from already parsed documents; the names are used in messages.
  static Tokenizer from_json(const nlohmann::json& tokenizer_json, const nlohmann::json& tokenizer_config_json,
                             const TokenizerOptions& options = {},
                             const std::string& tokenizer_name = "tokenizer.json",
                             const std::string& config_name = "tokenizer_config.json") {
    return Tokenizer(
        detail::build_tokenizer_core(tokenizer_json, tokenizer_name, tokenizer_config_json, config_name, options));
  }

  /// \brief Token ids of `text`.
  /// \param text               UTF-8 text; added tokens written in it (e.g. `<｜User｜>`) become
  ///                           those tokens
  /// \param add_special_tokens prepend bos / append eos as tokenizer_config.json's
  ///                           add_bos_token / add_eos_token say
  /// \throws Error(invalid_argument) when `text` is not valid UTF-8 (the message gives the offset).
  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = false) const {
    if (const std::size_t bad = utf8::find_invalid(text); bad != std::string_view::npos) {
      static constexpr char hex[] = "0123456789ABCDEF";
      const auto b = static_cast<unsigned char>(text[bad]);
      fail(ErrorKind::invalid_argument, "encode: input is not valid UTF-8: byte 0x", hex[b >> 4], hex[b & 15],
           " at offset ", bad, " of ", text.size());
    }
    std::vector<std::int32_t> ids;
    ids.reserve(text.size() / 3 + 2);
    if (add_special_tokens && core_->config.add_bos_token) ids.push_back(*core_->bos_id);
    const bpe::PreTokenizer& pre = *core_->pre_tokenizer;
    const bpe::BpeModel& model = *core_->model;
    core_->added.split(
        text,
        [&](std::string_view plain) {
          pre.pre_tokenize(plain, [&](std::string_view piece) { model.tokenize(piece, ids); });
        },
        [&](const bpe::AddedToken& token) { ids.push_back(token.id); });
    if (add_special_tokens && core_->config.add_eos_token) ids.push_back(*core_->eos_id);
    return ids;
  }

  /// \brief Text of `ids`; bytes that do not form UTF-8 become U+FFFD.
  /// \param ids                 token ids
  /// \param skip_special_tokens leave out tokens marked `special` (bos, eos, pad, `<|EOT|>`, ...)
  /// \throws Error(invalid_argument) for an id that has no token.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const {
    std::string bytes;
    bytes.reserve(ids.size() * 4);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      core_->check_id(ids[i], "decode", i);
      if (skip_special_tokens && is_special(ids[i])) continue;
      bytes += core_->decoded(ids[i]);
    }
    if (utf8::is_valid(bytes)) return bytes;
    return utf8::decode_lossy(bytes);
  }

  /// \brief A decoder for ids that arrive one at a time (see StreamDecoder).
  StreamDecoder stream_decoder(bool skip_special_tokens = false) const;

  /// \brief The prompt text of a conversation, rendered as tokenizer_config.json's chat template
  ///        does (see ChatTemplate for the two templates implemented and what they render).
  /// \param messages the conversation
  /// \param options  add_generation_prompt and thinking, as the template's variables
  /// \throws Error(unsupported) when the file's template is missing or not one of those implemented
  ///         and TokenizerOptions::require_known_chat_template is set; errors of ChatTemplate::render.
  std::string apply_chat_template(std::span<const ChatMessage> messages, const ChatTemplateOptions& options) const {
    if (core_->require_known_chat_template && !core_->chat_template_kind) {
      const std::optional<std::string>& source = core_->config.chat_template;
      if (!source) {
        fail(ErrorKind::unsupported,
             "tokenizer_config.json has no chat_template: its chat format is DeepSeek-V3.2's encoding, which is not a "
             "Jinja template (render with deepseek_v3_2::encode_messages); set "
             "TokenizerOptions::require_known_chat_template = false to render with the rules of "
             "TokenizerOptions::fallback_chat_template");
      }
      fail(ErrorKind::unsupported, "tokenizer_config.json chat_template (", source->size(), " bytes, fingerprint 0x",
           std::hex, ChatTemplate::fingerprint(*source),
           ") is neither of the templates this library implements (DeepSeek-V3.2-Exp's, fingerprint 0x",
           ChatTemplate::deepseek_v3_2_exp_fingerprint, "; DeepSeek-V3's, fingerprint 0x",
           ChatTemplate::deepseek_v3_fingerprint, std::dec,
           "); set TokenizerOptions::require_known_chat_template = false to render with the rules of "
           "TokenizerOptions::fallback_chat_template");
    }
    return core_->chat_template.render(messages, options);
  }

  /// \brief apply_chat_template() without thinking mode.
  std::string apply_chat_template(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    return apply_chat_template(messages, ChatTemplateOptions{.add_generation_prompt = add_generation_prompt});
  }

  /// \brief Token ids of a conversation: apply_chat_template() then encode() (the rendered text
  ///        already starts with bos, so none is added).
  std::vector<std::int32_t> encode_chat(std::span<const ChatMessage> messages, const ChatTemplateOptions& options) const {
    return encode(apply_chat_template(messages, options), false);
  }

  /// \brief encode_chat() without thinking mode.
  std::vector<std::int32_t> encode_chat(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    return encode(apply_chat_template(messages, add_generation_prompt), false);
  }

  /// \brief Which implemented template tokenizer_config.json's `chat_template` is, or nullopt when
  ///        it has none or an unknown one.
  std::optional<ChatTemplateKind> chat_template_kind() const noexcept { return core_->chat_template_kind; }

  /// \brief The chat format of these files: TokenizerOptions::chat_format when given; else the
  ///        format of a recognized template, DeepSeek-V3.2's when tokenizer_config.json has no
  ///        template (or an `encoding/` folder is beside it), nullopt for an unknown template.
  std::optional<ChatFormat> chat_format() const noexcept { return core_->chat_format; }

  /// \brief The template apply_chat_template() renders with: the file's when recognized, else
  ///        TokenizerOptions::fallback_chat_template's rules (used only when
  ///        TokenizerOptions::require_known_chat_template is false).
  const ChatTemplate& chat_template() const noexcept { return core_->chat_template; }

  /// \brief Id of tokenizer_config.json's bos_token, if it names one.
  std::optional<std::int32_t> bos_id() const noexcept { return core_->bos_id; }
  /// \brief Id of tokenizer_config.json's eos_token (where generation stops), if it names one.
  std::optional<std::int32_t> eos_id() const noexcept { return core_->eos_id; }
  /// \brief Id of tokenizer_config.json's pad_token, if it names one.
  std::optional<std::int32_t> pad_id() const noexcept { return core_->pad_id; }

  /// \brief One past the largest token id (model vocabulary and added tokens together). Every id
  ///        below it that has a token can be decoded. A model's embedding table may be larger.
  std::size_t vocab_size() const noexcept { return core_->flags.size(); }

  /// \brief Whether `id` has a token.
  bool contains(std::int32_t id) const noexcept { return core_->is_known(id); }

  /// \brief The token text of `id` in vocabulary form (byte-level, e.g. `"Ġthe"`, or an added
  ///        token's content), or nullopt when `id` has no token.
  std::optional<std::string_view> id_to_token(std::int32_t id) const {
    if (!core_->is_known(id)) return std::nullopt;
    return std::string_view(core_->token_text[static_cast<std::size_t>(id)]);
  }

  /// \brief The id of a token given in vocabulary form (added tokens first), or nullopt.
  std::optional<std::int32_t> token_to_id(std::string_view token) const { return core_->token_to_id(token); }

  /// \brief Whether `id` is an added token marked `special` (false for ids without a token).
  bool is_special(std::int32_t id) const noexcept {
    return core_->is_known(id) && (core_->flags[static_cast<std::size_t>(id)] & detail::TokenizerCore::special);
  }

  /// \brief Whether encode(text, true) prepends bos (tokenizer_config.json add_bos_token).
  bool add_bos_token() const noexcept { return core_->config.add_bos_token; }
  /// \brief Whether encode(text, true) appends eos (tokenizer_config.json add_eos_token).
  bool add_eos_token() const noexcept { return core_->config.add_eos_token; }

  /// \brief The chat template text of tokenizer_config.json, if any.
  const std::optional<std::string>& chat_template_source() const noexcept { return core_->config.chat_template; }

  /// \brief The added tokens, in file order.
  const std::vector<bpe::AddedToken>& added_tokens() const noexcept { return core_->added.tokens(); }

 private:
  friend class StreamDecoder;
  explicit Tokenizer(std::shared_ptr<const detail::TokenizerCore> core) : core_(std::move(core)) {}
  std::shared_ptr<const detail::TokenizerCore> core_;
};

/// \brief Decodes ids that arrive one at a time, returning only text that is complete.
///
/// A byte-level token can end inside a multi-byte character (an emoji is often two tokens); the
/// decoder holds such bytes back until the character is complete. The concatenation of all push()
/// results and finish() equals Tokenizer::decode() of all the ids. It keeps a reference to the
/// tokenizer's tables, so it stays valid even if the Tokenizer it came from is destroyed.
class StreamDecoder {
 public:
  /// \param tokenizer           the tokenizer whose ids will be pushed
  /// \param skip_special_tokens leave out tokens marked `special`
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false)
      : core_(tokenizer.core_), skip_special_(skip_special_tokens) {}

  /// \brief Adds one id; returns the text it completes (possibly empty).
  /// \throws Error(invalid_argument) for an id without a token (the decoder is left unchanged).
  std::string push(std::int32_t id) {
    core_->check_id(id, "StreamDecoder::push", position_);
    ++position_;
    if (skip_special_ && (core_->flags[static_cast<std::size_t>(id)] & detail::TokenizerCore::special)) return {};
    pending_ += core_->decoded(id);
    std::string out;
    const std::size_t consumed = utf8::append_lossy(out, pending_, false);
    pending_.erase(0, consumed);
    return out;
  }

  /// \brief Ends the stream: returns U+FFFD for a character left incomplete (or nothing), and
  ///        resets the decoder for a new stream.
  std::string finish() {
    std::string out = utf8::decode_lossy(pending_);
    reset();
    return out;
  }

  /// \brief Whether bytes of an incomplete character are held back.
  bool has_pending() const noexcept { return !pending_.empty(); }

  /// \brief Forgets held-back bytes and starts a new stream.
  void reset() noexcept {
    pending_.clear();
    position_ = 0;
  }

 private:
  std::shared_ptr<const detail::TokenizerCore> core_;
  bool skip_special_;
  std::string pending_;  // at most 3 bytes: the start of an incomplete character
  std::size_t position_ = 0;
};

inline StreamDecoder Tokenizer::stream_decoder(bool skip_special_tokens) const {
  return StreamDecoder(*this, skip_special_tokens);
}

/// @}

}  // namespace dsv32
