/// \file
/// \brief dsv32::ChatFormat — which of DeepSeek's chat formats a conversation is rendered in and a
///        reply is parsed with, and their names.
///
/// | format | prompt | reply |
/// |---|---|---|
/// | DeepSeek-V3 | its Jinja template (ChatTemplate) | answer, V3's tool-call tokens |
/// | DeepSeek-V3.2-Exp | its Jinja template (ChatTemplate), thinking mode | `</think>`, tool-call tokens |
/// | DeepSeek-V3.2 (and V3.2-Speciale) | the Python encoding module (deepseek_v3_2::encode_messages) | `</think>`, DSML tool calls |
///
/// A Tokenizer tells the format of its files (Tokenizer::chat_format(): a recognized template is
/// its model's format; a tokenizer_config.json without a template, or an `encoding/` folder beside
/// it, is DeepSeek-V3.2's); callers may also choose one by name (chat_format_from_name()).
#pragma once

#include <optional>
#include <string_view>

namespace dsv32 {

/// \addtogroup tokenizer
/// @{

/// \brief DeepSeek's chat formats.
enum class ChatFormat {
  deepseek_v3,        ///< DeepSeek-V3's Jinja template
  deepseek_v3_2_exp,  ///< DeepSeek-V3.2-Exp's Jinja template (thinking mode, tool-call tokens)
  deepseek_v3_2,      ///< DeepSeek-V3.2's encoding module (developer role, tools, DSML tool calls); also V3.2-Speciale's
};

/// \brief The command-line name of a format: `deepseek-v3`, `deepseek-v3.2-exp`, `deepseek-v3.2`.
constexpr std::string_view chat_format_name(ChatFormat format) noexcept {
  switch (format) {
    case ChatFormat::deepseek_v3: return "deepseek-v3";
    case ChatFormat::deepseek_v3_2_exp: return "deepseek-v3.2-exp";
    case ChatFormat::deepseek_v3_2: return "deepseek-v3.2";
  }
  return "unknown";
}

/// \brief The model a format belongs to, as printed in messages: `DeepSeek-V3`, `DeepSeek-V3.2-Exp`,
///        `DeepSeek-V3.2`.
constexpr std::string_view to_string(ChatFormat format) noexcept {
  switch (format) {
    case ChatFormat::deepseek_v3: return "DeepSeek-V3";
    case ChatFormat::deepseek_v3_2_exp: return "DeepSeek-V3.2-Exp";
    case ChatFormat::deepseek_v3_2: return "DeepSeek-V3.2";
  }
  return "unknown";
}

/// \brief The format named `text` (chat_format_name()), or nullopt.
constexpr std::optional<ChatFormat> chat_format_from_name(std::string_view text) noexcept {
  for (const ChatFormat f : {ChatFormat::deepseek_v3, ChatFormat::deepseek_v3_2_exp, ChatFormat::deepseek_v3_2}) {
    if (chat_format_name(f) == text) return f;
  }
  return std::nullopt;
}

/// @}

}  // namespace dsv32
