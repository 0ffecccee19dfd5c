/// \file
/// \brief dsv32::ChatOutputParser — structured output of DeepSeek's replies, parsed as the tokens
///        arrive: reasoning, answer, tool calls (DeepSeek-V3.2-Exp's format, and DeepSeek-V3.2's).
///
/// **DeepSeek-V3.2-Exp** (and V3): a reply generated after the chat template's generation prompt
/// has this shape (the markers are single tokens; see dsv32::chat_tokens):
///
///     [reasoning </think>] answer [<｜tool▁calls▁begin｜> call... <｜tool▁calls▁end｜>] [<｜end▁of▁sentence｜>]
///     call := <｜tool▁call▁begin｜> name <｜tool▁sep｜> arguments <｜tool▁call▁end｜>
///
/// The reasoning part is there when the prompt ended with `<think>` (thinking mode:
/// ChatOutputParser::start_state() tells) or when the reply itself starts with `<think>`. The
/// parser turns pushed token ids (or text) into ChatOutputDelta values — the reasoning and answer
/// text each input completes, and each tool call as soon as its `<｜tool▁call▁end｜>` arrives —
/// and keeps the whole ChatOutput; ChatOutput::message() is the assistant message to put back
/// into the conversation.
///
/// **DeepSeek-V3.2** (ChatFormat::deepseek_v3_2): the reply is text with DSML tool calls, parsed by
/// deepseek_v3_2::CompletionScanner (see deepseek_v3_2_completion.hpp for the grammar): the same
/// message as deepseek_v3_2::parse_completion() whatever the chunks, each call delivered at its
/// `</｜DSML｜invoke`, and malformed output handed back as content instead of thrown.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dsv32/core/error.hpp"
#include "dsv32/tokenizer/chat_format.hpp"
#include "dsv32/tokenizer/chat_reply.hpp"
#include "dsv32/tokenizer/chat_template.hpp"
#include "dsv32/tokenizer/deepseek_v3_2_completion.hpp"
#include "dsv32/tokenizer/tokenizer.hpp"
#include "dsv32/tokenizer/utf8.hpp"

namespace dsv32 {

/// \addtogroup tokenizer
/// @{

/// \brief Parses a reply as it is generated (see the file description for the grammar).
///
/// Input is token ids — push(), with the tokenizer given to the constructor; the markers are
/// recognised by id, and other tokens decode as with Tokenizer::decode (special tokens skipped) —
/// or text — push_text(), where the markers are recognised by their spelling even when split
/// across pushes, as the tokenizer would encode that text. Every output text is complete UTF-8
/// characters (a character split across inputs waits for the rest).
///
/// Out-of-place markers (a tool call outside `<｜tool▁calls▁begin｜>`, text other than whitespace
/// between calls, `</think>` in the middle of the answer, a reply that ends inside a tool call)
/// throw dsv32::Error(invalid_argument) naming what was expected and what was found; what was
/// parsed before stays in output(), and the parser refuses further input until reset(). Two
/// tolerances: a `<think>` opening the reply starts the reasoning, and a `</think>` before any
/// answer in a reply that had no reasoning is dropped (the template's non-thinking prompt ends
/// with one).
///
/// With ChatFormat::deepseek_v3_2 the reply is DeepSeek-V3.2's (deepseek_v3_2::CompletionScanner):
/// ids decode as Tokenizer::decode without skipping special tokens (the eos is text of the format),
/// push() and push_text() throw only for an id without a token, and a reply that breaks the format
/// is handed back as content from there on: state() becomes ChatOutputState::malformed and
/// malformed_reason() says why; input after the end is such content too.
class ChatOutputParser {
 public:
  /// \brief A parser of text (push_text() only) in DeepSeek-V3.2-Exp's format.
  /// \param start ChatOutputState::reasoning when the prompt ended with `<think>`, else
  ///              ChatOutputState::content (see start_state())
  /// \throws Error(invalid_argument) for another start state.
  explicit ChatOutputParser(ChatOutputState start = ChatOutputState::content) { reset(start); }

  /// \brief A parser of text (push_text() only) in `format` (DeepSeek-V3's replies parse as
  ///        DeepSeek-V3.2-Exp's).
  ChatOutputParser(ChatFormat format, ChatOutputState start) : format_(format) { reset(start); }

  /// \brief A parser of token ids of `tokenizer` (and of text), in the tokenizer's chat format
  ///        (Tokenizer::chat_format(); DeepSeek-V3.2-Exp's when it has none).
  /// \param tokenizer the model's tokenizer; the parser keeps a copy (which shares its tables)
  /// \param start     as for the text parser
  explicit ChatOutputParser(const Tokenizer& tokenizer, ChatOutputState start = ChatOutputState::content)
      : ChatOutputParser(tokenizer, tokenizer.chat_format().value_or(ChatFormat::deepseek_v3_2_exp), start) {}

  /// \brief A parser of token ids of `tokenizer` (and of text) in `format`.
  ChatOutputParser(const Tokenizer& tokenizer, ChatFormat format, ChatOutputState start)
      : format_(format), tokenizer_(tokenizer),
        decoder_(tokenizer_->stream_decoder(/*skip_special_tokens=*/format != ChatFormat::deepseek_v3_2)) {
    for (std::size_t m = 0; m < markers.size(); ++m) {
      if (const auto id = tokenizer_->token_to_id(markers[m])) marker_ids_.push_back({*id, static_cast<Marker>(m)});
    }
    if (const auto eos = tokenizer_->eos_id()) marker_ids_.push_back({*eos, Marker::end_of_sentence});
    reset(start);
  }

  /// \brief The state a reply starts in after `prompt`: reasoning when it ends with `<think>`.
  static ChatOutputState start_state(std::string_view prompt) noexcept {
    return prompt.ends_with(chat_tokens::think_begin) ? ChatOutputState::reasoning : ChatOutputState::content;
  }

  /// \brief Adds one generated token id.
  /// \throws Error(state) without a tokenizer, after the end or an error; Error(invalid_argument)
  ///         for an id without a token, or an out-of-place marker.
  ChatOutputDelta push(std::int32_t id) {
    if (!tokenizer_) fail(ErrorKind::state, "ChatOutputParser::push(id): this parser has no tokenizer (use push_text)");
    if (dsml_) {
      ChatOutputDelta delta;
      dsml_->push(decoder_->push(id), delta);
      return delta;
    }
    check_open();
    ChatOutputDelta delta;
    flush_text(delta);
    for (const auto& [marker_id, marker] : marker_ids_) {
      if (marker_id == id) {
        text(decoder_->finish(), delta);
        on_marker(marker, delta);
        return delta;
      }
    }
    text(decoder_->push(id), delta);
    return delta;
  }

  /// \brief Adds generated text; markers may be split across calls.
  /// \throws Error(state) after an error, or for text after the end; Error(invalid_argument) for an out-of-place
  ///         marker.
  ChatOutputDelta push_text(std::string_view input) {
    if (dsml_) {
      ChatOutputDelta delta;
      if (decoder_) dsml_->push(decoder_->finish(), delta);
      dsml_->push(input, delta);
      return delta;
    }
    if (input.empty() && state_ == ChatOutputState::ended) return {};
    check_open();
    ChatOutputDelta delta;
    if (decoder_) text(decoder_->finish(), delta);
    pending_ += input;
    std::string_view rest = pending_;
    std::size_t done = 0;  // bytes of pending_ handled
    while (true) {
      const std::size_t lt = rest.find('<', done);
      if (lt == std::string_view::npos) {
        const std::size_t keep = utf8::truncated_tail_length(rest.substr(done));
        text(rest.substr(done, rest.size() - done - keep), delta);
        done = rest.size() - keep;
        break;
      }
      text(rest.substr(done, lt - done), delta);
      done = lt;
      const std::string_view here = rest.substr(lt);
      bool matched = false;
      bool partial = false;
      for (std::size_t m = 0; m < markers.size() && !matched; ++m) {
        if (here.starts_with(markers[m])) {
          done += markers[m].size();
          on_marker(static_cast<Marker>(m), delta);
          matched = true;
        } else if (here.size() < markers[m].size() && markers[m].starts_with(here)) {
          partial = true;
        }
      }
      if (matched) {
        if (state_ == ChatOutputState::ended) {
          if (done < rest.size()) {
            const std::string after(rest.substr(done));
            pending_.clear();
            fail_input("text after <｜end▁of▁sentence｜>: \"" + after + "\"");
          }
          break;
        }
        continue;
      }
      if (partial) break;  // the start of a marker, perhaps: wait for more
      text(rest.substr(lt, 1), delta);
      done = lt + 1;
    }
    pending_.erase(0, done);
    return delta;
  }

  /// \brief Ends the reply: text held back (an incomplete character or marker) is emitted as is.
  /// \throws Error(invalid_argument) when the reply ends inside tool calls (after emitting the
  ///         rest); Error(state) after an error.
  ChatOutputDelta finish() {
    ChatOutputDelta delta;
    if (dsml_) {
      if (decoder_) dsml_->push(decoder_->finish(), delta);
      dsml_->finish(delta);
      return delta;
    }
    if (state_ == ChatOutputState::ended) return delta;
    check_open();
    flush_text(delta);
    if (decoder_) text(decoder_->finish(), delta);
    if (state_ == ChatOutputState::tool_calls || state_ == ChatOutputState::tool_name ||
        state_ == ChatOutputState::tool_arguments) {
      fail_input("the end of the reply inside tool calls");
    }
    state_ = ChatOutputState::ended;
    return delta;
  }

  /// \brief Forgets the reply and starts a new one in state `start` (reasoning or content).
  /// \throws Error(invalid_argument) for another start state.
  void reset(ChatOutputState start = ChatOutputState::content) {
    if (start != ChatOutputState::reasoning && start != ChatOutputState::content) {
      fail(ErrorKind::invalid_argument, "ChatOutputParser: a reply starts in the reasoning or content state");
    }
    if (format_ == ChatFormat::deepseek_v3_2) {
      if (dsml_) dsml_->reset(start == ChatOutputState::reasoning);
      else dsml_.emplace(start == ChatOutputState::reasoning);
    }
    state_ = start;
    output_ = {};
    call_ = {};
    pending_.clear();
    if (decoder_) decoder_->reset();
    had_reasoning_ = start == ChatOutputState::reasoning;
    offset_ = 0;
  }

  /// \brief Everything parsed so far.
  const ChatOutput& output() const noexcept { return dsml_ ? dsml_->output() : output_; }

  /// \brief Where the parser is.
  ChatOutputState state() const noexcept { return dsml_ ? dsml_->state() : state_; }

  /// \brief The format parsed.
  ChatFormat format() const noexcept { return format_; }

  /// \brief DeepSeek-V3.2: what broke the format, with its byte offset ("" while it holds, and
  ///        always for the other formats, which throw instead).
  const std::string& malformed_reason() const noexcept {
    static const std::string none;
    return dsml_ ? dsml_->malformed_reason() : none;
  }

 private:
  enum class Marker { think_begin, think_end, tool_calls_begin, tool_calls_end, tool_call_begin, tool_sep,
                      tool_call_end, end_of_sentence };
  static constexpr std::array<std::string_view, 8> markers = {
      chat_tokens::think_begin,     chat_tokens::think_end, chat_tokens::tool_calls_begin, chat_tokens::tool_calls_end,
      chat_tokens::tool_call_begin, chat_tokens::tool_sep,  chat_tokens::tool_call_end,    chat_tokens::end_of_sentence};

  void check_open() const {
    if (state_ == ChatOutputState::ended) {
      fail(ErrorKind::state, "ChatOutputParser: input after the end of the reply (call reset() for a new one)");
    }
    if (state_ == ChatOutputState::failed) {
      fail(ErrorKind::state, "ChatOutputParser: input after an error (call reset() for a new reply)");
    }
  }

  // Text held back by push_text(), emitted as text before input of another kind.
  void flush_text(ChatOutputDelta& delta) {
    if (pending_.empty()) return;
    const std::string held = std::move(pending_);
    pending_.clear();
    text(held, delta);
  }

  std::string expected() const {
    switch (state_) {
      case ChatOutputState::reasoning: return "expected reasoning text, </think> or <｜end▁of▁sentence｜>";
      case ChatOutputState::content:
        return "expected answer text, <｜tool▁calls▁begin｜> or <｜end▁of▁sentence｜>";
      case ChatOutputState::tool_calls: return "expected <｜tool▁call▁begin｜> or <｜tool▁calls▁end｜>";
      case ChatOutputState::tool_name: return "expected the tool's name, then <｜tool▁sep｜>";
      case ChatOutputState::tool_arguments: return "expected the arguments, then <｜tool▁call▁end｜>";
      default: return "expected nothing more";
    }
  }

  [[noreturn]] void fail_input(const std::string& found) {
    const std::string where = expected();
    state_ = ChatOutputState::failed;
    fail(ErrorKind::invalid_argument, "chat output: found ", found, " at byte ", offset_, " of the reply (", where, ")");
  }

  void text(std::string_view s, ChatOutputDelta& delta) {
    if (s.empty()) return;
    switch (state_) {
      case ChatOutputState::reasoning:
        output_.reasoning += s;
        delta.reasoning += s;
        break;
      case ChatOutputState::content:
        output_.content += s;
        delta.content += s;
        break;
      case ChatOutputState::tool_calls:
        if (s.find_first_not_of(" \t\r\n") != std::string_view::npos) fail_input("text \"" + std::string(s) + "\"");
        break;
      case ChatOutputState::tool_name: call_.name += s; break;
      case ChatOutputState::tool_arguments: call_.arguments += s; break;
      default: break;
    }
    offset_ += s.size();
  }

  void on_marker(Marker marker, ChatOutputDelta& delta) {
    using S = ChatOutputState;
    const S s = state_;
    const bool answer_empty = output_.content.empty() && output_.tool_calls.empty();
    switch (marker) {
      case Marker::think_begin:
        if (s == S::reasoning && output_.reasoning.empty()) break;  // the prompt's <think>, repeated
        if (s == S::content && answer_empty && !had_reasoning_) {
          state_ = S::reasoning;
          had_reasoning_ = true;
          break;
        }
        fail_input("<think>");
      case Marker::think_end:
        if (s == S::reasoning) {
          state_ = S::content;
          break;
        }
        if (s == S::content && answer_empty && !had_reasoning_) break;  // the non-thinking prompt's </think>
        fail_input("</think>");
      case Marker::tool_calls_begin:
        if (s != S::content) fail_input("<｜tool▁calls▁begin｜>");
        state_ = S::tool_calls;
        break;
      case Marker::tool_call_begin:
        if (s != S::tool_calls) fail_input("<｜tool▁call▁begin｜>");
        state_ = S::tool_name;
        break;
      case Marker::tool_sep:
        if (s != S::tool_name) fail_input("<｜tool▁sep｜>");
        state_ = S::tool_arguments;
        break;
      case Marker::tool_call_end:
        if (s != S::tool_arguments) fail_input("<｜tool▁call▁end｜>");
        output_.tool_calls.push_back(call_);
        delta.tool_calls.push_back(std::move(call_));
        call_ = {};
        state_ = S::tool_calls;
        break;
      case Marker::tool_calls_end:
        if (s != S::tool_calls) fail_input("<｜tool▁calls▁end｜>");
        state_ = S::content;
        break;
      case Marker::end_of_sentence:
        if (s != S::reasoning && s != S::content) fail_input("<｜end▁of▁sentence｜>");
        state_ = S::ended;
        break;
    }
    offset_ += markers[static_cast<std::size_t>(marker)].size();
  }

  ChatFormat format_ = ChatFormat::deepseek_v3_2_exp;
  std::optional<deepseek_v3_2::CompletionScanner> dsml_;  // DeepSeek-V3.2's replies
  std::optional<Tokenizer> tokenizer_;
  std::optional<StreamDecoder> decoder_;
  std::vector<std::pair<std::int32_t, Marker>> marker_ids_;
  ChatOutputState state_ = ChatOutputState::content;
  ChatOutput output_;
  ToolCall call_;            // the call being read
  std::string pending_;      // push_text(): the start of a marker or of a character, held back
  bool had_reasoning_ = false;
  std::size_t offset_ = 0;   // bytes of the reply consumed (for messages)
};

/// @}

}  // namespace dsv32
