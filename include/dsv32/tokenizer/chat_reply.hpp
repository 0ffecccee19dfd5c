/// \file
/// \brief A parsed assistant reply (dsv32::ChatOutput), what one input adds to it
///        (dsv32::ChatOutputDelta) and where a reply parser is (dsv32::ChatOutputState): shared by
///        the parsers of DeepSeek-V3.2-Exp's replies (ChatOutputParser) and DeepSeek-V3.2's
///        (deepseek_v3_2::parse_completion, deepseek_v3_2::CompletionScanner).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dsv32/tokenizer/chat_template.hpp"

namespace dsv32 {

/// \addtogroup tokenizer
/// @{

/// \brief A parsed reply.
struct ChatOutput {
  std::string reasoning;             ///< the text before `</think>` (thinking mode)
  std::string content;               ///< the answer: the text after `</think>`, outside tool calls
  std::vector<ToolCall> tool_calls;  ///< the calls, in order

  /// \brief The assistant message for the conversation: the answer, the calls and the reasoning
  ///        (as `reasoning_content`, which DeepSeek-V3.2's encoding prints for the turns after the
  ///        last user message and drops before it; the V3.2-Exp template ignores it).
  ChatMessage message() const {
    ChatMessage m{"assistant", content, tool_calls};
    m.reasoning_content = reasoning;
    return m;
  }

  /// \brief Field-wise equality.
  friend bool operator==(const ChatOutput&, const ChatOutput&) = default;
};

/// \brief What one push completed: concatenating the deltas of a stream gives its ChatOutput.
struct ChatOutputDelta {
  std::string reasoning;             ///< reasoning text
  std::string content;               ///< answer text
  std::vector<ToolCall> tool_calls;  ///< tool calls completed by this push

  /// \brief Whether the push completed nothing.
  bool empty() const noexcept { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

/// \brief Where a reply parser is in the reply.
enum class ChatOutputState {
  reasoning,       ///< before `</think>`
  content,         ///< the answer
  tool_calls,      ///< in the tool calls, between two calls
  tool_name,       ///< reading a call's name
  tool_arguments,  ///< reading a call's arguments
  ended,           ///< after `<｜end▁of▁sentence｜>` or finish()
  failed,          ///< DeepSeek-V3.2-Exp: after an error (reset() starts over)
  malformed,       ///< DeepSeek-V3.2: the reply broke the format; the rest is content, as generated
};

/// @}

}  // namespace dsv32
