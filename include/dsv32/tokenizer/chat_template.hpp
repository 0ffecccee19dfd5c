/// \file
/// \brief The DeepSeek-V3 chat template, implemented directly instead of through a Jinja engine.
///
/// `tokenizer_config.json` carries a Jinja template (`chat_template`). This library does not
/// interpret Jinja; it implements what that one template renders for plain conversations of
/// system, user and assistant messages, and recognises the template by a fingerprint of its text
/// so that a different template is reported instead of silently rendered wrongly.
///
/// What the template renders (and ChatTemplate::render reproduces byte for byte):
/// - `bos_token`, then the contents of all system messages — wherever they appear in the list —
///   joined with `"\n\n"`;
/// - then, in order, each user message as `<｜User｜>` + content, and each assistant message as
///   `<｜Assistant｜>` + content + `<｜end▁of▁sentence｜>`; system messages add nothing here;
/// - with `add_generation_prompt`, a final `<｜Assistant｜>`.
///
/// Not supported, and rejected with dsv32::Error: tool calls (an assistant message with null
/// content, or with `tool_calls`), tool outputs (role `"tool"`), and roles the template does not
/// know (which it would silently drop). Contents are inserted verbatim: text that spells a control
/// token such as `<｜User｜>` is encoded as that token, as with the reference implementation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv32/core/error.hpp"

namespace dsv32 {

/// \addtogroup tokenizer
/// @{

/// \brief One message of a conversation.
struct ChatMessage {
  std::string role;     ///< `"system"`, `"user"` or `"assistant"`
  std::string content;  ///< the text, inserted verbatim
};

/// \brief Renders conversations as DeepSeek-V3's `chat_template` does (see the file description).
class ChatTemplate {
 public:
  /// \brief FNV-1a 64-bit hash of the exact `chat_template` text of DeepSeek-V3's
  ///        tokenizer_config.json (2301 bytes), the template implemented here.
  static constexpr std::uint64_t deepseek_v3_fingerprint = 0xebe3604156dc466aULL;

  static constexpr std::string_view user_tag = "<｜User｜>";                  ///< starts a user turn
  static constexpr std::string_view assistant_tag = "<｜Assistant｜>";        ///< starts an assistant turn
  static constexpr std::string_view end_of_turn = "<｜end▁of▁sentence｜>";   ///< ends an assistant turn

  /// \brief FNV-1a 64-bit hash of a template's text.
  static constexpr std::uint64_t fingerprint(std::string_view source) noexcept {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (char c : source) {
      h ^= static_cast<unsigned char>(c);
      h *= 0x100000001b3ULL;
    }
    return h;
  }

  /// \brief Whether `source` is the template text implemented here.
  static constexpr bool is_deepseek_v3(std::string_view source) noexcept {
    return fingerprint(source) == deepseek_v3_fingerprint;
  }

  /// \param bos_token the text of the template variable `bos_token` (empty when the tokenizer
  ///                  config defines none, as Jinja renders an undefined variable)
  explicit ChatTemplate(std::string bos_token = {}) : bos_token_(std::move(bos_token)) {}

  /// \brief The rendered prompt.
  /// \param messages              the conversation
  /// \param add_generation_prompt append the tag that starts the assistant's reply
  /// \throws Error(unsupported) for role "tool"; Error(invalid_argument) for any role other than
  ///         system, user and assistant.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    std::size_t size = bos_token_.size() + assistant_tag.size();
    for (std::size_t i = 0; i < messages.size(); ++i) {
      check_role(messages[i].role, i);
      size += messages[i].content.size() + assistant_tag.size() + end_of_turn.size() + 2;
    }
    std::string out;
    out.reserve(size);
    out += bos_token_;
    bool first_system = true;
    for (const ChatMessage& m : messages) {
      if (m.role != "system") continue;
      if (!first_system) out += "\n\n";
      out += m.content;
      first_system = false;
    }
    for (const ChatMessage& m : messages) {
      if (m.role == "user") {
        out += user_tag;
        out += m.content;
      } else if (m.role == "assistant") {
        out += assistant_tag;
        out += m.content;
        out += end_of_turn;
      }
    }
    if (add_generation_prompt) out += assistant_tag;
    return out;
  }

  /// \brief The text rendered for `bos_token`.
  const std::string& bos_token() const noexcept { return bos_token_; }

 private:
  static void check_role(const std::string& role, std::size_t index) {
    if (role == "system" || role == "user" || role == "assistant") return;
    if (role == "tool") {
      fail(ErrorKind::unsupported, "chat message ", index,
           ": role \"tool\" (tool outputs) is not supported by this chat template implementation");
    }
    fail(ErrorKind::invalid_argument, "chat message ", index, ": unknown role \"", role,
         "\" (expected \"system\", \"user\" or \"assistant\")");
  }

  std::string bos_token_;
};

/// \brief Reads an OpenAI-style message list: `[{"role": "...", "content": "..."}, ...]`.
///
/// Extra keys are ignored, as the template ignores them — except `tool_calls`, which is rejected.
/// \throws Error(invalid_argument) when the JSON does not have this shape;
///         Error(unsupported) for tool calls (null content or a non-empty `tool_calls`) and role
///         "tool".
inline std::vector<ChatMessage> chat_messages_from_json(const nlohmann::json& messages) {
  if (!messages.is_array()) {
    fail(ErrorKind::invalid_argument, "chat messages: expected a JSON array, found ", messages.type_name());
  }
  std::vector<ChatMessage> out;
  out.reserve(messages.size());
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::json& m = messages[i];
    if (!m.is_object()) {
      fail(ErrorKind::invalid_argument, "chat message ", i, ": expected a JSON object, found ", m.type_name());
    }
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      fail(ErrorKind::invalid_argument, "chat message ", i, ": expected a string \"role\", found ",
           role == m.end() ? "none" : role->type_name());
    }
    const std::string role_text = role->get<std::string>();
    if (role_text == "tool") {
      fail(ErrorKind::unsupported, "chat message ", i,
           ": role \"tool\" (tool outputs) is not supported by this chat template implementation");
    }
    const auto tool_calls = m.find("tool_calls");
    if (tool_calls != m.end() && !tool_calls->is_null() && !(tool_calls->is_array() && tool_calls->empty())) {
      fail(ErrorKind::unsupported, "chat message ", i, ": tool calls are not supported");
    }
    const auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      fail(ErrorKind::unsupported, "chat message ", i, " (role \"", role_text,
           "\"): null or missing content (tool-call turns) is not supported");
    }
    if (!content->is_string()) {
      fail(ErrorKind::invalid_argument, "chat message ", i, ": expected a string \"content\", found ",
           content->type_name());
    }
    out.push_back({role_text, content->get<std::string>()});
  }
  return out;
}

/// @}

}  // namespace dsv32
