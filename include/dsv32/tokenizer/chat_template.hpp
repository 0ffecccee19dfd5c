/// \file
/// \brief DeepSeek's chat templates (DeepSeek-V3.2-Exp's and DeepSeek-V3's), implemented directly
///        instead of through a Jinja engine.
///
/// `tokenizer_config.json` carries a Jinja template (`chat_template`). This library does not
/// interpret Jinja; it implements what two known templates render, byte for byte as Hugging Face
/// transformers' `apply_chat_template` does, and recognises them by a fingerprint of their text
/// so that a different template is reported instead of silently rendered wrongly.
///
/// **DeepSeek-V3.2-Exp** (ChatTemplateKind::deepseek_v3_2_exp, with the extra keyword `thinking`):
/// - `bos_token`, then the contents of all system messages — wherever they appear — joined with
///   `"\n\n"`;
/// - a user message: `<｜User｜>` + content;
/// - an assistant message after a user message: `<｜Assistant｜>`, then `</think>` (or `<think>`
///   for a `prefix` message when `thinking` is on), then the content with everything up to and
///   including its first `</think>` removed, then `<｜end▁of▁sentence｜>`; the same message after
///   tool outputs is its content (not stripped) and `<｜end▁of▁sentence｜>`, with no role token;
/// - an assistant message with tool calls: `<｜Assistant｜></think>` when it follows a user
///   message or only system messages, then its content, `<｜tool▁calls▁begin｜>`, per call
///   `<｜tool▁call▁begin｜>` name `<｜tool▁sep｜>` arguments `<｜tool▁call▁end｜>`, and
///   `<｜tool▁calls▁end｜><｜end▁of▁sentence｜>`;
/// - a tool message: `<｜tool▁output▁begin｜>` + content + `<｜tool▁output▁end｜>`;
/// - with `add_generation_prompt`: nothing after a tool output; else `<｜Assistant｜>` + (`<think>`
///   if thinking else `</think>`), except after a rendered `prefix` message when the last message
///   is neither a user message nor preceded only by system messages.
///
/// **DeepSeek-V3** (ChatTemplateKind::deepseek_v3): bos and the system messages as above, each user
/// message as `<｜User｜>` + content, each assistant message as `<｜Assistant｜>` + content +
/// `<｜end▁of▁sentence｜>`, and `<｜Assistant｜>` for the generation prompt. Its tool-call format
/// (which the published template renders inconsistently), `prefix` and thinking mode are refused.
///
/// Contents are inserted verbatim: text that spells a control token such as `<｜User｜>` is encoded
/// as that token, as with the reference implementation. Messages the templates would render into
/// nonsense or fail on (unknown roles, which they drop silently; a tool output with no tool call
/// before it) are refused with dsv32::Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
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

/// \brief The control tokens of DeepSeek's chat format (all are single tokens of the vocabulary;
///        `<think>` and `</think>` only in the tokenizers of DeepSeek-V3.1 and later).
namespace chat_tokens {
inline constexpr std::string_view user = "<｜User｜>";                           ///< starts a user turn
inline constexpr std::string_view assistant = "<｜Assistant｜>";                 ///< starts an assistant turn
inline constexpr std::string_view end_of_sentence = "<｜end▁of▁sentence｜>";     ///< ends an assistant turn (eos)
inline constexpr std::string_view think_begin = "<think>";                       ///< opens the reasoning
inline constexpr std::string_view think_end = "</think>";                        ///< ends the reasoning
inline constexpr std::string_view tool_calls_begin = "<｜tool▁calls▁begin｜>";   ///< opens a turn's tool calls
inline constexpr std::string_view tool_calls_end = "<｜tool▁calls▁end｜>";       ///< closes a turn's tool calls
inline constexpr std::string_view tool_call_begin = "<｜tool▁call▁begin｜>";     ///< opens one call (name first)
inline constexpr std::string_view tool_sep = "<｜tool▁sep｜>";                   ///< between name and arguments
inline constexpr std::string_view tool_call_end = "<｜tool▁call▁end｜>";         ///< closes one call
inline constexpr std::string_view tool_output_begin = "<｜tool▁output▁begin｜>"; ///< opens a tool's output
inline constexpr std::string_view tool_output_end = "<｜tool▁output▁end｜>";     ///< closes a tool's output
}  // namespace chat_tokens

/// \brief A function call made by the assistant (OpenAI's `{"type": "function", "function":
///        {"name", "arguments"}}`).
struct ToolCall {
  std::string name;       ///< the function's name
  std::string arguments;  ///< its arguments as JSON text, inserted verbatim (not parsed)

  /// \brief Field-wise equality.
  friend bool operator==(const ToolCall&, const ToolCall&) = default;
};

/// \brief One message of a conversation.
///
/// `ChatMessage{"user", "Hi"}` is a plain message; the other fields default to "none". The last
/// three fields belong to DeepSeek-V3.2's encoding (deepseek_v3_2::encode_messages); the Jinja
/// templates of DeepSeek-V3 and V3.2-Exp ignore them, as they ignore those keys in JSON.
struct ChatMessage {
  std::string role;                    ///< `"system"`, `"user"`, `"assistant"` or `"tool"` (V3.2 also `"developer"`)
  std::string content;                 ///< the text, inserted verbatim (`""` for JSON null)
  std::vector<ToolCall> tool_calls{};  ///< calls made by an assistant message (empty: none)
  bool prefix = false;                 ///< an assistant message to be continued (prefix completion)
  std::string reasoning_content{};     ///< an assistant message's reasoning (V3.2 prints it after the last user turn)
  nlohmann::ordered_json tools{};      ///< V3.2, system or developer message: OpenAI-style tool list (null: none)
  nlohmann::ordered_json response_format{};  ///< V3.2, system or developer message: the reply's schema (null: none)

  /// \brief Field-wise equality.
  friend bool operator==(const ChatMessage&, const ChatMessage&) = default;
};

/// \brief The chat templates this library implements.
enum class ChatTemplateKind {
  deepseek_v3,        ///< DeepSeek-V3's (system, user, assistant)
  deepseek_v3_2_exp,  ///< DeepSeek-V3.2-Exp's (thinking mode, tool calls, tool outputs, prefix)
};

/// \brief Name of a ChatTemplateKind, as printed in messages ("DeepSeek-V3", "DeepSeek-V3.2-Exp").
constexpr std::string_view to_string(ChatTemplateKind kind) noexcept {
  return kind == ChatTemplateKind::deepseek_v3 ? "DeepSeek-V3" : "DeepSeek-V3.2-Exp";
}

/// \brief The variables a template is rendered with besides the messages (the keyword arguments of
///        transformers' `apply_chat_template`).
struct ChatTemplateOptions {
  /// Append what starts the assistant's reply (`<｜Assistant｜>` and, for DeepSeek-V3.2-Exp,
  /// `</think>` or `<think>`).
  bool add_generation_prompt = false;
  /// DeepSeek-V3.2-Exp's thinking mode: the reply starts with reasoning (`<think>`), which the
  /// model closes with `</think>` before the answer. Refused by DeepSeek-V3's template, which has
  /// no thinking mode.
  bool thinking = false;
};

/// \brief Renders conversations as DeepSeek-V3.2-Exp's or DeepSeek-V3's `chat_template` does (see
///        the file description).
class ChatTemplate {
 public:
  /// \brief FNV-1a 64-bit hash of the exact `chat_template` text of DeepSeek-V3's
  ///        tokenizer_config.json (2301 bytes).
  static constexpr std::uint64_t deepseek_v3_fingerprint = 0xebe3604156dc466aULL;
  /// \brief FNV-1a 64-bit hash of the exact `chat_template` text of DeepSeek-V3.2-Exp's
  ///        tokenizer_config.json (3245 bytes).
  static constexpr std::uint64_t deepseek_v3_2_exp_fingerprint = 0x21d0c351e642e333ULL;

  /// \brief FNV-1a 64-bit hash of a template's text.
  static constexpr std::uint64_t fingerprint(std::string_view source) noexcept {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (char c : source) {
      h ^= static_cast<unsigned char>(c);
      h *= 0x100000001b3ULL;
    }
    return h;
  }

  /// \brief Which implemented template `source` is (by its exact text), or nullopt.
  static constexpr std::optional<ChatTemplateKind> recognize(std::string_view source) noexcept {
    const std::uint64_t h = fingerprint(source);
    if (h == deepseek_v3_2_exp_fingerprint) return ChatTemplateKind::deepseek_v3_2_exp;
    if (h == deepseek_v3_fingerprint) return ChatTemplateKind::deepseek_v3;
    return std::nullopt;
  }

  /// \brief Whether `source` is DeepSeek-V3's template text.
  static constexpr bool is_deepseek_v3(std::string_view source) noexcept {
    return recognize(source) == ChatTemplateKind::deepseek_v3;
  }

  /// \param kind      the template's rules
  /// \param bos_token the text of the template variable `bos_token` (empty when the tokenizer
  ///                  config defines none, as Jinja renders an undefined variable)
  explicit ChatTemplate(ChatTemplateKind kind = ChatTemplateKind::deepseek_v3_2_exp, std::string bos_token = {})
      : kind_(kind), bos_token_(std::move(bos_token)) {}

  /// \brief The prompt text of a conversation.
  /// \throws Error(invalid_argument) for an unknown role, tool calls or `prefix` on a message that
  ///         is not the assistant's, or a tool message that does not follow an assistant message
  ///         with tool calls (or another tool message); Error(unsupported) for what DeepSeek-V3's
  ///         template cannot render (tool calls, tool messages, `prefix`, thinking).
  std::string render(std::span<const ChatMessage> messages, const ChatTemplateOptions& options) const {
    check(messages, options);
    return kind_ == ChatTemplateKind::deepseek_v3 ? render_v3(messages, options.add_generation_prompt)
                                                  : render_v3_2_exp(messages, options);
  }

  /// \brief render() without thinking mode.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    return render(messages, ChatTemplateOptions{.add_generation_prompt = add_generation_prompt});
  }

  /// \brief The rules this template renders with.
  ChatTemplateKind kind() const noexcept { return kind_; }

  /// \brief Whether the template has a thinking mode (ChatTemplateOptions::thinking).
  bool has_thinking_mode() const noexcept { return kind_ == ChatTemplateKind::deepseek_v3_2_exp; }

  /// \brief The text rendered for `bos_token`.
  const std::string& bos_token() const noexcept { return bos_token_; }

 private:
  void check(std::span<const ChatMessage> messages, const ChatTemplateOptions& options) const {
    const bool v3 = kind_ == ChatTemplateKind::deepseek_v3;
    if (v3 && options.thinking) {
      fail(ErrorKind::unsupported, "thinking mode: DeepSeek-V3's chat template has none (DeepSeek-V3.2-Exp's has)");
    }
    for (std::size_t i = 0; i < messages.size(); ++i) {
      const ChatMessage& m = messages[i];
      if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") {
        fail(ErrorKind::invalid_argument, "chat message ", i, ": unknown role \"", m.role,
             "\" (expected \"system\", \"user\", \"assistant\" or \"tool\")");
      }
      if (m.role != "assistant" && !m.tool_calls.empty()) {
        fail(ErrorKind::invalid_argument, "chat message ", i, ": tool_calls on a \"", m.role,
             "\" message (only assistant messages make tool calls)");
      }
      if (m.role != "assistant" && m.prefix) {
        fail(ErrorKind::invalid_argument, "chat message ", i, ": prefix on a \"", m.role,
             "\" message (only an assistant message can be continued)");
      }
      if (v3) {
        if (m.role == "tool") {
          fail(ErrorKind::unsupported, "chat message ", i,
               ": role \"tool\" (tool outputs) is not supported with DeepSeek-V3's chat template");
        }
        if (!m.tool_calls.empty()) {
          fail(ErrorKind::unsupported, "chat message ", i,
               ": tool calls are not supported with DeepSeek-V3's chat template");
        }
        if (m.prefix) {
          fail(ErrorKind::unsupported, "chat message ", i,
               ": prefix is not supported with DeepSeek-V3's chat template (DeepSeek-V3.2-Exp's has it)");
        }
      } else if (m.role == "tool") {
        const ChatMessage* before = i == 0 ? nullptr : &messages[i - 1];
        if (before == nullptr || !(before->role == "tool" || !before->tool_calls.empty())) {
          fail(ErrorKind::invalid_argument, "chat message ", i,
               ": a tool message must follow an assistant message with tool_calls (or another tool message), "
               "found it ",
               before == nullptr ? std::string("at the start of the conversation")
                                 : "after a \"" + before->role + "\" message" +
                                       (before->role == "assistant" ? " without tool_calls" : ""));
        }
      }
    }
  }

  void append_system_prompt(std::string& out, std::span<const ChatMessage> messages) const {
    out += bos_token_;
    bool first_system = true;
    for (const ChatMessage& m : messages) {
      if (m.role != "system") continue;
      if (!first_system) out += "\n\n";
      out += m.content;
      first_system = false;
    }
  }

  static std::size_t size_hint(std::span<const ChatMessage> messages) {
    std::size_t size = 64;
    for (const ChatMessage& m : messages) {
      size += m.content.size() + 64;
      for (const ToolCall& c : m.tool_calls) size += c.name.size() + c.arguments.size() + 64;
    }
    return size;
  }

  std::string render_v3(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    std::string out;
    out.reserve(bos_token_.size() + size_hint(messages));
    append_system_prompt(out, messages);
    for (const ChatMessage& m : messages) {
      if (m.role == "user") {
        out += chat_tokens::user;
        out += m.content;
      } else if (m.role == "assistant") {
        out += chat_tokens::assistant;
        out += m.content;
        out += chat_tokens::end_of_sentence;
      }
    }
    if (add_generation_prompt) out += chat_tokens::assistant;
    return out;
  }

  // The template's loop, with its namespace flags (ns.is_last_user, ns.is_tool, ns.is_only_sys,
  // ns.is_prefix) kept under the same names.
  std::string render_v3_2_exp(std::span<const ChatMessage> messages, const ChatTemplateOptions& options) const {
    using namespace chat_tokens;
    std::string out;
    out.reserve(bos_token_.size() + size_hint(messages));
    append_system_prompt(out, messages);
    // The template sets is_only_sys while gathering the system prompt, i.e. when any message —
    // even a late one — is a system message, and clears it at the first other message.
    bool is_only_sys = false;
    for (const ChatMessage& m : messages) is_only_sys |= m.role == "system";
    bool is_last_user = false;
    bool is_tool = false;
    bool is_prefix = false;
    for (const ChatMessage& m : messages) {
      if (m.role == "user") {
        is_tool = false;
        is_last_user = true;
        out += user;
        out += m.content;
      } else if (m.role == "assistant" && !m.tool_calls.empty()) {
        if (is_last_user || is_only_sys) {
          out += assistant;
          out += think_end;
        }
        is_last_user = false;
        is_tool = false;
        out += m.content;  // JSON null content renders as nothing, as "" does
        out += tool_calls_begin;
        for (const ToolCall& call : m.tool_calls) {
          out += tool_call_begin;
          out += call.name;
          out += tool_sep;
          out += call.arguments;
          out += tool_call_end;
        }
        out += tool_calls_end;
        out += end_of_sentence;
      } else if (m.role == "assistant") {
        if (is_last_user) {
          out += assistant;
          out += m.prefix && options.thinking ? think_begin : think_end;
        }
        if (m.prefix) is_prefix = true;
        is_last_user = false;
        if (is_tool) {
          out += m.content;
          is_tool = false;
        } else {
          // Reasoning is not kept in the history: only what follows the first </think>.
          const std::size_t end = m.content.find(think_end);
          out += end == std::string::npos ? std::string_view(m.content)
                                          : std::string_view(m.content).substr(end + think_end.size());
        }
        out += end_of_sentence;
      } else if (m.role == "tool") {
        is_last_user = false;
        is_tool = true;
        out += tool_output_begin;
        out += m.content;
        out += tool_output_end;
      }
      if (m.role != "system") is_only_sys = false;
    }
    if (options.add_generation_prompt && !is_tool && (is_last_user || is_only_sys || !is_prefix)) {
      out += assistant;
      out += options.thinking ? think_begin : think_end;
    }
    return out;
  }

  ChatTemplateKind kind_;
  std::string bos_token_;
};

/// \brief Reads an OpenAI-style message list:
///        `[{"role": "...", "content": "..." | null, "tool_calls": [...], "prefix": true|false}, ...]`.
///
/// `tool_calls` (assistant messages) is a list of `{"type": "function", "function": {"name":
/// "...", "arguments": "<JSON text>"}}` (`type` may be left out; `id` and other keys are ignored);
/// `null` and `[]` mean no calls. `content` is a string, or null for an assistant message with tool
/// calls (rendered as `""` is). Other keys (`name`, `tool_call_id`, `reasoning_content`...) are
/// ignored, as the templates ignore them. Roles and the order of messages are checked when
/// rendering (ChatTemplate::render).
/// \throws Error(invalid_argument) naming the message and field when the JSON does not have this
///         shape: not an array of objects, a missing or non-string role or content, null content
///         where it is not allowed, malformed tool calls, arguments that are not a string, a
///         non-boolean `prefix`.
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
    ChatMessage message;
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      fail(ErrorKind::invalid_argument, "chat message ", i, ": expected a string \"role\", found ",
           role == m.end() ? "none" : role->type_name());
    }
    message.role = role->get<std::string>();

    if (const auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
      if (!calls->is_array()) {
        fail(ErrorKind::invalid_argument, "chat message ", i, ": tool_calls: expected an array, found ",
             calls->type_name());
      }
      for (std::size_t c = 0; c < calls->size(); ++c) {
        const nlohmann::json& call = (*calls)[c];
        const auto where = [&] { return "chat message " + std::to_string(i) + ": tool_calls[" + std::to_string(c) + "]"; };
        if (!call.is_object()) {
          fail(ErrorKind::invalid_argument, where(), ": expected an object {\"type\": \"function\", \"function\": "
               "{\"name\", \"arguments\"}}, found ", call.type_name());
        }
        if (const auto type = call.find("type");
            type != call.end() && !(type->is_string() && type->get<std::string>() == "function")) {
          fail(ErrorKind::invalid_argument, where(), ".type: expected \"function\", found ", type->dump());
        }
        const auto function = call.find("function");
        if (function == call.end() || !function->is_object()) {
          fail(ErrorKind::invalid_argument, where(), ".function: expected an object {\"name\", \"arguments\"}, found ",
               function == call.end() ? "none" : function->type_name());
        }
        ToolCall parsed;
        for (const auto& [field, target] : {std::pair<const char*, std::string*>{"name", &parsed.name},
                                            std::pair<const char*, std::string*>{"arguments", &parsed.arguments}}) {
          const auto value = function->find(field);
          if (value == function->end() || !value->is_string()) {
            fail(ErrorKind::invalid_argument, where(), ".function.", field, ": expected a string",
                 std::string_view(field) == "arguments" ? " (the arguments as JSON text, as OpenAI's API sends them)"
                                                        : "",
                 ", found ", value == function->end() ? "none" : value->dump());
          }
          *target = value->get<std::string>();
        }
        message.tool_calls.push_back(std::move(parsed));
      }
    }

    const auto content = m.find("content");
    if (content == m.end()) {
      fail(ErrorKind::invalid_argument, "chat message ", i, " (role \"", message.role,
           "\"): missing \"content\" (a string; null for an assistant message that only makes tool calls)");
    }
    if (content->is_null()) {
      if (message.role != "assistant" || message.tool_calls.empty()) {
        fail(ErrorKind::invalid_argument, "chat message ", i, " (role \"", message.role,
             "\"): \"content\" is null; only an assistant message with tool_calls may have null content");
      }
    } else if (!content->is_string()) {
      fail(ErrorKind::invalid_argument, "chat message ", i, ": expected a string \"content\", found ",
           content->type_name());
    } else {
      message.content = content->get<std::string>();
    }

    if (const auto prefix = m.find("prefix"); prefix != m.end() && !prefix->is_null()) {
      if (!prefix->is_boolean()) {
        fail(ErrorKind::invalid_argument, "chat message ", i, ": \"prefix\" must be true or false, found ",
             prefix->dump());
      }
      message.prefix = prefix->get<bool>();
    }
    out.push_back(std::move(message));
  }
  return out;
}

/// \brief nlohmann/json conversion (nlohmann::json or ordered_json): `{"type": "function",
///        "function": {"name", "arguments"}}`.
template <class BasicJson>
void to_json(BasicJson& j, const ToolCall& call) {
  j = BasicJson{{"type", "function"}, {"function", BasicJson{{"name", call.name}, {"arguments", call.arguments}}}};
}

/// \brief nlohmann/json conversion (nlohmann::json or ordered_json): `{"role", "content"}`, plus `"tool_calls"`, `"prefix"`,
///        `"reasoning_content"`, `"tools"` and `"response_format"` when set — the form
///        chat_messages_from_json() and deepseek_v3_2::messages_from_json() read.
template <class BasicJson>
void to_json(BasicJson& j, const ChatMessage& message) {
  j = BasicJson{{"role", message.role}, {"content", message.content}};
  if (!message.tool_calls.empty()) j["tool_calls"] = message.tool_calls;
  if (message.prefix) j["prefix"] = true;
  if (!message.reasoning_content.empty()) j["reasoning_content"] = message.reasoning_content;
  if (!message.tools.is_null()) j["tools"] = BasicJson(message.tools);
  if (!message.response_format.is_null()) j["response_format"] = BasicJson(message.response_format);
}

/// @}

}  // namespace dsv32
