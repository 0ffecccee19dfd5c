/// \file
/// \brief DeepSeek-V3.2's chat encoding (also DeepSeek-V3.2-Speciale's): conversations to prompt
///        text, byte for byte as the model's Python module `encoding/encoding_dsv32.py`
///        (`encode_messages`) writes it.
///
/// DeepSeek-V3.2 ships no Jinja template; its format is that module. The prompt is the bos, then
/// per message:
/// - **system**: its content; with `tools`, a blank line and the tools block (instructions, then
///   one JSON object per function inside `<functions>`); with `response_format`, a blank line and a
///   `## Response Format:` block holding its JSON. Several system messages are simply concatenated.
/// - **user**: `<｜User｜>content<｜Assistant｜>`, then `<think>` when it is the last user-like
///   message and the mode is thinking, else `</think>`.
/// - **developer** (user-like): as a user message whose text is the optional tools and
///   response-format blocks, then `\n\n# The user's message is: ` and the content (which must not
///   be empty).
/// - **assistant**: reasoning + `</think>` (thinking mode, turns after the last user-like message
///   only; there a turn needs reasoning or tool calls), the content, the DSML tool-call block if
///   any, `<｜end▁of▁sentence｜>`. Chat mode and earlier turns never print reasoning.
/// - **tool**: the results answering the preceding assistant's calls, in order, grouped in one
///   `<function_results>` block which the result for the last call closes, followed by `<think>`
///   (thinking mode, after the last user-like message) or `</think>`.
///
/// Tool-call block: `\n\n<｜DSML｜function_calls>`, per call `<｜DSML｜invoke name="NAME">` and one
/// `<｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter>` line per argument
/// (strings raw, other values as Python's `json.dumps`; see python_json.hpp), `</｜DSML｜invoke>`,
/// and `</｜DSML｜function_calls>`. The module's golden output (DeepSeek's `test_output.txt`) has
/// blank lines in the tools block that copies of the module (sglang's, vLLM's) lack; this is the
/// golden form.
///
/// Refused, as the module refuses them (dsv32::Error(invalid_argument) naming the message and the
/// rule): an unknown role; a developer message without content; a tool message that does not
/// follow an assistant message with tool calls, or more results than calls; in thinking mode, an
/// assistant turn after the last user message with neither reasoning nor tool calls; arguments
/// that are not a JSON object; malformed `tools` or `tool_calls`; with `drop_thinking` in thinking
/// mode, a developer message before the last user-like message (the module drops it and then
/// fails). Refused where the module would print Python's representation of a non-string (`None`,
/// a list of content parts): such contents, names and reasoning; and `prefix` (no prefix
/// completion in this format). One deliberate difference: the module accepts a tool message at
/// index 0 when the *last* message has tool calls (Python's `messages[-1]`); it is refused here.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv32/core/error.hpp"
#include "dsv32/tokenizer/chat_template.hpp"
#include "dsv32/tokenizer/python_json.hpp"

namespace dsv32::deepseek_v3_2 {

/// \addtogroup tokenizer
/// @{

/// \brief The markers of DeepSeek-V3.2's format. bos, eos, `<｜User｜>`, `<｜Assistant｜>`,
///        `<think>` and `</think>` are single tokens; `｜DSML｜` is not (it encodes as four
///        ordinary tokens), so every DSML tag is several tokens, as are `<function_results>` and
///        `<result>`.
namespace tokens {
inline constexpr std::string_view bos = "<｜begin▁of▁sentence｜>";             ///< starts the prompt
inline constexpr std::string_view eos = "<｜end▁of▁sentence｜>";               ///< ends an assistant turn
inline constexpr std::string_view user = "<｜User｜>";                         ///< starts a user turn
inline constexpr std::string_view assistant = "<｜Assistant｜>";               ///< ends a user turn
inline constexpr std::string_view think_begin = "<think>";                     ///< opens the reasoning
inline constexpr std::string_view think_end = "</think>";                      ///< ends the reasoning
inline constexpr std::string_view dsml = "｜DSML｜";                           ///< the DSML tag prefix
inline constexpr std::string_view function_calls_start = "\n\n<｜DSML｜function_calls";  ///< where the answer ends
inline constexpr std::string_view function_calls_end = "</｜DSML｜function_calls>";      ///< closes the block
inline constexpr std::string_view invoke = "<｜DSML｜invoke";                  ///< opens a call
inline constexpr std::string_view invoke_end = "</｜DSML｜invoke";             ///< closes a call (then `>`)
inline constexpr std::string_view parameter = "<｜DSML｜parameter";            ///< opens an argument
inline constexpr std::string_view parameter_end = "/｜DSML｜parameter";        ///< closes an argument (after `<`, then `>`)
}  // namespace tokens

/// \brief The module's `encode_messages` arguments besides the messages.
struct EncodeOptions {
  /// `thinking_mode`: "thinking" (true) or "chat" (false). Thinking mode opens the reply after the
  /// last user-like message with `<think>`; the model writes reasoning, `</think>`, the answer.
  bool thinking = false;
  /// `drop_thinking` (thinking mode only): drop reasoning before the last user-like message (never
  /// printed anyway) — and developer messages there, which the module does not survive.
  bool drop_thinking = true;
};

/// \brief The module's tools block for `tools` (OpenAI form: each element's `function` is listed).
inline std::string tools_block(const nlohmann::ordered_json& tools) {
  static constexpr std::string_view preamble = R"(## Tools

You have access to a set of tools you can use to answer the user's question.
You can invoke functions by writing a "<｜DSML｜function_calls>" block like the following as part of your reply to the user:
<｜DSML｜function_calls>
<｜DSML｜invoke name="$FUNCTION_NAME">
<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>
...
</｜DSML｜invoke>
<｜DSML｜invoke name="$FUNCTION_NAME2">
...
</｜DSML｜invoke>
</｜DSML｜function_calls>

String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects should use JSON format. The "string" attribute should be set to "true" for string type parameters and "false" for other types (numbers, booleans, arrays, objects).

If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking block. Here is an example:

<｜DSML｜function_calls>
...
</｜DSML｜function_calls>

<function_results>
...
</function_results>

<think>...thinking about results</think>

Here are the functions available in JSONSchema format:
<functions>
)";
  std::string out(preamble);
  bool first = true;
  for (const auto& tool : tools) {
    if (!first) out += '\n';
    first = false;
    out += python_json::dumps(tool.at("function"));
  }
  out += "\n</functions>\n";
  return out;
}

/// \brief The module's response-format block for `response_format`.
inline std::string response_format_block(const nlohmann::ordered_json& response_format) {
  return "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n" +
         python_json::dumps(response_format);
}

namespace detail {

inline std::string where(std::size_t index, const ChatMessage& m) {
  return "DeepSeek-V3.2 encoding: message " + std::to_string(index) + " (role \"" + m.role + "\")";
}

// The module converts `tools` of every message (tool["function"] for each), whatever the role.
inline void check_tools(std::size_t index, const ChatMessage& m) {
  if (!python_json::truthy(m.tools)) return;
  if (!m.tools.is_array()) {
    fail(ErrorKind::invalid_argument, where(index, m), ": tools: expected an array of {\"type\": \"function\", "
         "\"function\": {...}}, found ", m.tools.type_name());
  }
  for (std::size_t t = 0; t < m.tools.size(); ++t) {
    const auto& tool = m.tools[t];
    if (!tool.is_object() || !tool.contains("function")) {
      fail(ErrorKind::invalid_argument, where(index, m), ": tools[", t,
           "]: expected an object {\"type\": \"function\", \"function\": {...}}, found ",
           tool.is_object() ? std::string("an object without \"function\"") : std::string(tool.type_name()));
    }
  }
}

// `\n\n` + the tools block and `\n\n` + the response-format block, as a system or developer
// message has them.
inline std::string system_blocks(const ChatMessage& m) {
  std::string out;
  if (python_json::truthy(m.tools)) out += "\n\n" + tools_block(m.tools);
  if (python_json::truthy(m.response_format)) out += "\n\n" + response_format_block(m.response_format);
  return out;
}

inline std::string tool_call_block(std::size_t index, const ChatMessage& m) {
  std::string out = "\n\n<｜DSML｜function_calls>\n";
  for (std::size_t c = 0; c < m.tool_calls.size(); ++c) {
    const ToolCall& call = m.tool_calls[c];
    const std::string what = where(index, m) + ": tool_calls[" + std::to_string(c) + "].function.arguments";
    const nlohmann::ordered_json arguments = python_json::loads(call.arguments, what);
    if (!arguments.is_object()) {
      fail(ErrorKind::invalid_argument, what, ": expected a JSON object (the module refuses other values), found ",
           arguments.type_name());
    }
    if (c > 0) out += '\n';
    out += "<｜DSML｜invoke name=\"" + call.name + "\">\n";
    bool first = true;
    for (auto it = arguments.begin(); it != arguments.end(); ++it) {
      if (!first) out += '\n';
      first = false;
      const bool is_string = it->is_string();
      out += "<｜DSML｜parameter name=\"" + it.key() + "\" string=\"" + (is_string ? "true" : "false") + "\">";
      out += is_string ? it->get_ref<const std::string&>() : python_json::dumps(*it);
      out += "</｜DSML｜parameter>";
    }
    out += "\n</｜DSML｜invoke>";
  }
  out += "\n</｜DSML｜function_calls>";
  return out;
}

inline bool user_like(const ChatMessage& m) { return m.role == "user" || m.role == "developer"; }

}  // namespace detail

/// \brief The prompt text of a conversation, as the module's `encode_messages(messages,
///        thinking_mode, drop_thinking=...)` (see the file description).
/// \throws Error(invalid_argument) naming the message and the rule for the conversations the
///         module refuses (and those it would print Python representations for).
inline std::string encode_messages(std::span<const ChatMessage> messages, const EncodeOptions& options = {}) {
  using detail::where;
  std::ptrdiff_t last_user = -1;
  for (std::size_t i = messages.size(); i-- > 0;) {
    if (detail::user_like(messages[i])) {
      last_user = static_cast<std::ptrdiff_t>(i);
      break;
    }
  }
  std::size_t size = tokens::bos.size();
  for (const ChatMessage& m : messages) size += m.content.size() + m.reasoning_content.size() + 64;
  std::string out;
  out.reserve(size);
  out += tokens::bos;
  const auto think_after = [&](bool open) { out += open ? tokens::think_begin : tokens::think_end; };
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const auto index = static_cast<std::ptrdiff_t>(i);
    if (m.role != "system" && m.role != "developer" && m.role != "user" && m.role != "assistant" && m.role != "tool") {
      fail(ErrorKind::invalid_argument, where(i, m),
           ": unknown role (the encoding has \"system\", \"developer\", \"user\", \"assistant\" and \"tool\")");
    }
    if (m.prefix) {
      fail(ErrorKind::invalid_argument, where(i, m),
           ": prefix: DeepSeek-V3.2's encoding has no prefix completion (its assistant turns always end with "
           "<｜end▁of▁sentence｜>)");
    }
    detail::check_tools(i, m);
    if (m.role == "developer" && options.thinking && options.drop_thinking && index < last_user) {
      fail(ErrorKind::invalid_argument, where(i, m),
           ": a developer message before the last user message, in thinking mode with drop_thinking: the module drops "
           "it and then fails (\"Index out of range\"); pass drop_thinking = false");
    }
    if (m.role == "system") {
      out += m.content;
      out += detail::system_blocks(m);
    } else if (m.role == "developer" || m.role == "user") {
      out += tokens::user;
      if (m.role == "developer") {
        if (m.content.empty()) {
          fail(ErrorKind::invalid_argument, where(i, m),
               ": a developer message needs content (the module refuses an empty one)");
        }
        out += detail::system_blocks(m);
        out += "\n\n# The user's message is: ";
      }
      out += m.content;
      out += tokens::assistant;
      think_after(index == last_user && options.thinking);
    } else if (m.role == "tool") {
      std::size_t assistant_index = i;  // the message the results answer
      while (assistant_index > 0 && messages[assistant_index - 1].role == "tool") --assistant_index;
      if (assistant_index == 0 || messages[assistant_index - 1].role != "assistant") {
        fail(ErrorKind::invalid_argument, where(i, m),
             ": a tool message must follow an assistant message with tool_calls (or another tool message), found it ",
             assistant_index == 0 ? std::string("at the start of the conversation")
                                  : "after a \"" + messages[assistant_index - 1].role + "\" message");
      }
      const ChatMessage& caller = messages[assistant_index - 1];
      const std::size_t order = i - assistant_index + 1;  // this result answers call `order` (from 1)
      if (caller.tool_calls.size() < order) {
        fail(ErrorKind::invalid_argument, where(i, m), ": result ", order, " of an assistant message (message ",
             assistant_index - 1, ") that made ", caller.tool_calls.size(),
             " tool call(s): there is no tool call for it");
      }
      if (order == 1) out += "\n\n<function_results>";
      out += "\n<result>";
      out += m.content;
      out += "</result>";
      if (order == caller.tool_calls.size()) {
        out += "\n</function_results>\n\n";
        think_after(index >= last_user && options.thinking);
      }
    } else {  // assistant
      const std::string calls = m.tool_calls.empty() ? std::string() : detail::tool_call_block(i, m);
      if (options.thinking && index > last_user) {
        if (m.reasoning_content.empty() && m.tool_calls.empty()) {
          fail(ErrorKind::invalid_argument, where(i, m),
               ": in thinking mode an assistant message after the last user message needs reasoning_content or "
               "tool_calls");
        }
        out += m.reasoning_content;
        out += tokens::think_end;
      }
      out += m.content;
      out += calls;
      out += tokens::eos;
    }
  }
  return out;
}

/// \brief Reads an OpenAI-style message list as the module reads it: `[{"role", "content",
///        "reasoning_content", "tool_calls", "tools", "response_format"}, ...]`.
///
/// `content` is a string, or null / absent where the module prints nothing for it (system,
/// assistant, developer — whose empty content encode_messages() refuses); `reasoning_content` a
/// string, null or absent; `tool_calls` (any role; only an assistant's are printed) a list of
/// `{"type": "function", "function": {"name": "...", "arguments": "<JSON object text>" | {...}}}`,
/// `null` or `[]` for none; `tools` and `response_format` are kept as given (checked and printed by
/// encode_messages(); both are ignored when false, null or empty, as in Python). Other keys
/// (`name`, `tool_call_id`, `prefix`, ...) are ignored, as the module ignores them. Parse the
/// request with python_json::loads() (or as nlohmann::ordered_json): key order is printed.
/// \throws Error(invalid_argument) naming the message and field when the JSON does not have this
///         shape.
inline std::vector<ChatMessage> messages_from_json(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) {
    fail(ErrorKind::invalid_argument, "DeepSeek-V3.2 messages: expected a JSON array, found ", messages.type_name());
  }
  std::vector<ChatMessage> out;
  out.reserve(messages.size());
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const auto at = [&] { return "DeepSeek-V3.2 messages: message " + std::to_string(i); };
    if (!m.is_object()) fail(ErrorKind::invalid_argument, at(), ": expected a JSON object, found ", m.type_name());
    ChatMessage message;
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      fail(ErrorKind::invalid_argument, at(), ": expected a string \"role\", found ",
           role == m.end() ? "none" : role->type_name());
    }
    message.role = role->get<std::string>();
    const auto text = [&](const char* field, bool null_allowed) -> std::string {
      const auto v = m.find(field);
      if (v != m.end() && v->is_string()) return v->get<std::string>();
      if ((v == m.end() || v->is_null()) && null_allowed) return {};
      fail(ErrorKind::invalid_argument, at(), " (role \"", message.role, "\"): \"", field, "\": expected a string",
           null_allowed ? " or null" : "", ", found ", v == m.end() ? "none" : v->type_name(),
           " (the encoding module would print Python's representation of it)");
    };
    const bool printed_as_is = message.role == "user" || message.role == "tool";  // "None" for null
    message.content = text("content", !printed_as_is);
    message.reasoning_content = text("reasoning_content", true);
    if (const auto tools = m.find("tools"); tools != m.end()) message.tools = *tools;
    if (const auto format = m.find("response_format"); format != m.end()) message.response_format = *format;
    if (const auto calls = m.find("tool_calls"); calls != m.end() && python_json::truthy(*calls)) {
      if (!calls->is_array()) {
        fail(ErrorKind::invalid_argument, at(), ": tool_calls: expected an array, found ", calls->type_name());
      }
      for (std::size_t c = 0; c < calls->size(); ++c) {
        const auto& call = (*calls)[c];
        const auto where = [&] { return at() + ": tool_calls[" + std::to_string(c) + "]"; };
        const auto function = call.is_object() ? call.find("function") : call.end();
        if (!call.is_object() || function == call.end() || !function->is_object()) {
          fail(ErrorKind::invalid_argument, where(), ": expected {\"type\": \"function\", \"function\": {\"name\", "
               "\"arguments\"}}, found ", call.is_object() ? "no \"function\" object" : call.type_name());
        }
        ToolCall parsed;
        const auto name = function->find("name");
        if (name == function->end() || !name->is_string()) {
          fail(ErrorKind::invalid_argument, where(), ".function.name: expected a string, found ",
               name == function->end() ? "none" : name->type_name());
        }
        parsed.name = name->get<std::string>();
        const auto arguments = function->find("arguments");
        if (arguments == function->end()) {
          fail(ErrorKind::invalid_argument, where(), ".function.arguments: missing (a JSON object, or its text)");
        }
        // A string is JSON text (read when the message is printed); anything else is kept as its
        // text, so that an object prints as given and other values are refused when printed.
        parsed.arguments = arguments->is_string() ? arguments->get<std::string>() : arguments->dump();
        message.tool_calls.push_back(std::move(parsed));
      }
    }
    out.push_back(std::move(message));
  }
  return out;
}

/// \brief An encoding request: the messages and the options.
struct EncodeRequest {
  std::vector<ChatMessage> messages;  ///< the conversation
  EncodeOptions options;              ///< thinking mode and drop_thinking
};

/// \brief Reads `{"messages": [...], "thinking_mode": "chat"|"thinking", "drop_thinking": true|false}`
///        (the input of `dsv32-tokenize --chat-format deepseek-v3.2 --chat`): thinking_mode defaults
///        to "chat", drop_thinking to true; other fields are refused.
/// \throws Error(invalid_argument) for another shape (and as messages_from_json()).
inline EncodeRequest request_from_json(const nlohmann::ordered_json& request) {
  if (!request.is_object()) {
    fail(ErrorKind::invalid_argument, "expected a JSON object {\"messages\": [...], \"thinking_mode\": "
         "\"chat\"|\"thinking\", \"drop_thinking\": true|false}, found ", request.type_name());
  }
  EncodeRequest out;
  for (auto it = request.begin(); it != request.end(); ++it) {
    if (it.key() == "messages") {
      out.messages = messages_from_json(*it);
    } else if (it.key() == "thinking_mode") {
      if (!it->is_string() || (*it != "chat" && *it != "thinking")) {
        fail(ErrorKind::invalid_argument, "\"thinking_mode\" must be \"chat\" or \"thinking\", found ", it->dump());
      }
      out.options.thinking = *it == "thinking";
    } else if (it.key() == "drop_thinking") {
      if (!it->is_boolean()) {
        fail(ErrorKind::invalid_argument, "\"drop_thinking\" must be true or false, found ", it->dump());
      }
      out.options.drop_thinking = it->get<bool>();
    } else {
      fail(ErrorKind::invalid_argument, "unknown field \"", it.key(),
           "\" (expected \"messages\", \"thinking_mode\", \"drop_thinking\")");
    }
  }
  if (!request.contains("messages")) fail(ErrorKind::invalid_argument, "missing field \"messages\"");
  return out;
}

/// @}

}  // namespace dsv32::deepseek_v3_2
