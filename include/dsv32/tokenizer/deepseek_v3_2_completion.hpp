/// \file
/// \brief DeepSeek-V3.2's replies (completions): the strict parser (parse_completion(), agreeing
///        with the Python module's `parse_message_from_completion_text`, errors included) and the
///        incremental one (CompletionScanner, behind ChatOutputParser for this format).
///
/// A completion — what the model writes after the prompt of deepseek_v3_2::encode_messages — is
///
///     [reasoning </think>] content [\n\n<｜DSML｜function_calls>\n invoke... </｜DSML｜function_calls>] <｜end▁of▁sentence｜>
///     invoke := <｜DSML｜invoke name="NAME">\n (<｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter>\n)* </｜DSML｜invoke>\n
///
/// with the reasoning part in thinking mode only. The rules, as the module applies them: the
/// reasoning runs to the first `</think>`, which must come before any tool-call block; the
/// content runs to the eos or to `\n\n<｜DSML｜function_calls`; the block is matched exactly
/// (newlines, attribute order, `string="true"` or `"false"`, no parameter twice in a call); only
/// the eos may follow it, and nothing may follow the eos; bos, eos, `<think>`, `</think>` or
/// `｜DSML｜` inside the content or the reasoning is an error. A call's arguments are rebuilt as
/// JSON text: `{"KEY": VALUE, ...}` with string values JSON-quoted and other values inserted
/// verbatim (not validated). A block without the final eos is accepted, and so are the cut-off
/// blocks the module accepts (ending right after `\n\n<｜DSML｜function_calls`, after an invoke's
/// opening line, after `</｜DSML｜invoke` without its `>`, or after a parameter's closing line).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv32/core/error.hpp"
#include "dsv32/tokenizer/chat_reply.hpp"
#include "dsv32/tokenizer/deepseek_v3_2_encoding.hpp"
#include "dsv32/tokenizer/python_json.hpp"
#include "dsv32/tokenizer/tokenizer.hpp"
#include "dsv32/tokenizer/utf8.hpp"

namespace dsv32::deepseek_v3_2 {

/// \addtogroup tokenizer
/// @{

namespace detail {

// Python's `\s` on str (str.isspace()): Unicode White_Space less U+180E, plus U+001C..U+001F.
constexpr bool python_space(char32_t c) noexcept {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Bytes of leading Python whitespace in `s`; `incomplete` is set when it stops at a character cut
// off by the end of `s` (which may still turn out to be whitespace).
inline std::size_t python_space_prefix(std::string_view s, bool* incomplete = nullptr) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = utf8::decode_at(s, i);
    if (!c) {
      if (incomplete) *incomplete = utf8::inspect_sequence(s, i).status == utf8::SequenceStatus::truncated;
      return i;
    }
    if (!python_space(c->first)) break;
    i += c->second;
  }
  if (incomplete) *incomplete = false;
  return i;
}

/// One argument of a call, as written: its name, whether `string="true"`, its raw value.
struct Parameter {
  std::string name;
  bool is_string = false;
  std::string value;
};

// The module's `^\s*name="(.*?)">\n$` (DOTALL) on the text between `<｜DSML｜invoke` and the next
// `<｜DSML｜parameter` / `</｜DSML｜invoke`: the name, or nullopt. (`$` also matches before a final
// newline, so the text may end with `">\n\n`.)
inline std::optional<std::string> match_invoke_name(std::string_view between) {
  std::string_view rest = between.substr(python_space_prefix(between));
  if (!rest.starts_with("name=\"")) return std::nullopt;
  rest.remove_prefix(6);
  if (rest.ends_with("\">\n\n")) return std::string(rest.substr(0, rest.size() - 4));
  if (rest.ends_with("\">\n")) return std::string(rest.substr(0, rest.size() - 3));
  return std::nullopt;
}

// The module's `^ name="(.*?)" string="(true|false)">(.*?)<$` (DOTALL) on the text between
// `<｜DSML｜parameter` and `/｜DSML｜parameter`. The name ends at the first `" string="true">` or
// `" string="false">`; the value runs to the final `<` (or `<\n`).
inline std::optional<Parameter> match_parameter(std::string_view between) {
  if (!between.starts_with(" name=\"")) return std::nullopt;
  std::string_view rest = between.substr(7);
  std::size_t value_end = 0;
  if (rest.ends_with("<")) {
    value_end = rest.size() - 1;
  } else if (rest.ends_with("<\n")) {
    value_end = rest.size() - 2;
  } else {
    return std::nullopt;
  }
  static constexpr std::string_view attr_true = "\" string=\"true\">";
  static constexpr std::string_view attr_false = "\" string=\"false\">";
  const std::size_t t = rest.find(attr_true);
  const std::size_t f = rest.find(attr_false);
  const std::size_t at = std::min(t, f);
  if (at == std::string_view::npos) return std::nullopt;
  const std::size_t value_begin = at + (at == t ? attr_true.size() : attr_false.size());
  if (value_begin > value_end) return std::nullopt;
  return Parameter{std::string(rest.substr(0, at)), at == t, std::string(rest.substr(value_begin, value_end - value_begin))};
}

// The module's arguments text: {"KEY": VALUE, ...}, string values quoted as json.dumps does.
inline std::string arguments_json(const std::vector<Parameter>& parameters) {
  std::string out = "{";
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    if (i > 0) out += ", ";
    python_json::append_string(out, parameters[i].name);
    out += ": ";
    if (parameters[i].is_string) {
      python_json::append_string(out, parameters[i].value);
    } else {
      out += parameters[i].value;
    }
  }
  return out + "}";
}

// The module's _read_until_stop: the text from `index` to the earliest of `stops` (the first
// listed on a tie), the stop's index (or -1 when none occurs: then the text runs to the end) and
// where reading goes on.
struct Read {
  std::string_view between;
  int stop = -1;
  std::size_t next = 0;
};
inline Read read_until(std::string_view text, std::size_t index, std::initializer_list<std::string_view> stops) {
  std::size_t best = std::string_view::npos;
  int which = -1;
  int k = 0;
  for (const std::string_view s : stops) {
    const std::size_t p = text.find(s, index);
    if (p < best) {
      best = p;
      which = k;
    }
    ++k;
  }
  if (which < 0) return {text.substr(index), -1, text.size()};
  return {text.substr(index, best - index), which, best + std::data(stops)[which].size()};
}

// A short quotation of model output for messages.
inline std::string shown(std::string_view s) {
  std::string out;
  python_json::append_string(out, s.size() > 60 ? s.substr(0, 57) : s);
  if (s.size() > 60) out.insert(out.size() - 1, "...");
  return out;
}

}  // namespace detail

/// \brief Parses a complete reply as the module's `parse_message_from_completion_text(text,
///        thinking_mode)` does (see the file description).
/// \param text     the completion: the model's output after the prompt, as text (decode the ids
///                 without skipping special tokens: the eos is part of it)
/// \param thinking thinking mode (the prompt ended with `<think>`): the reply starts with reasoning
/// \returns reasoning (empty in chat mode), content and tool calls (arguments as JSON text)
/// \throws Error(invalid_argument) for the texts the module refuses, naming its rule and the byte
///         where it failed; also for text that is not UTF-8.
inline ChatOutput parse_completion(std::string_view text, bool thinking) {
  using detail::read_until;
  using detail::shown;
  namespace t = tokens;
  const auto error = [&](std::size_t at, std::string_view rule, const std::string& what) {
    fail(ErrorKind::invalid_argument, "DeepSeek-V3.2 completion: ", rule, " at byte ", at, ": ", what);
  };
  if (const std::size_t bad = utf8::find_invalid(text); bad != std::string_view::npos) {
    error(bad, "not UTF-8", "the completion must be UTF-8 text");
  }
  ChatOutput out;
  std::size_t index = 0;
  if (thinking) {
    const auto r = read_until(text, 0, {t::think_end, t::function_calls_start});
    out.reasoning = r.between;
    if (r.stop != 0) {
      error(r.between.size(), "invalid thinking format",
            r.stop < 0 ? "the reasoning must end with </think>, found the end of the text"
                       : "the reasoning must end with </think> before a tool-call block, found \\n\\n<｜DSML｜function_calls");
    }
    index = r.next;
  }
  const std::size_t content_at = index;
  const auto content = read_until(text, index, {t::eos, t::function_calls_start});
  out.content = content.between;
  index = content.next;
  if (content.stop < 0) {
    error(text.size(), "invalid summary format",
          "expected <｜end▁of▁sentence｜> or a tool-call block, found the end of the text");
  }
  if (content.stop == 1) {  // the tool-call block: invokes until </｜DSML｜function_calls> or the end
    while (index < text.size()) {
      const std::size_t open_at = index;
      const auto open = read_until(text, index, {t::invoke, t::function_calls_end});
      index = open.next;
      if (open.between != ">\n") {
        error(open_at, "tool call format error",
              "expected \">\\n\" then <｜DSML｜invoke or </｜DSML｜function_calls>, found " + shown(text.substr(open_at, 40)));
      }
      if (open.stop == 1) break;
      if (open.stop < 0) {
        error(open_at, "missing special token", "expected <｜DSML｜invoke or </｜DSML｜function_calls> after \">\\n\"");
      }
      const std::size_t name_at = index;
      auto read = read_until(text, index, {t::parameter, t::invoke_end});
      index = read.next;
      const std::optional<std::string> name = detail::match_invoke_name(read.between);
      if (!name) {
        error(name_at, "tool name format error",
              "expected ` name=\"NAME\">` and a newline after <｜DSML｜invoke, found " + shown(read.between));
      }
      std::vector<detail::Parameter> parameters;
      while (read.stop == 0) {
        const std::size_t param_at = index;
        const auto param = read_until(text, index, {t::parameter_end});
        index = param.next;
        const std::optional<detail::Parameter> p = detail::match_parameter(param.between);
        if (!p) {
          error(param_at, "parameter format error",
                "expected ` name=\"KEY\" string=\"true|false\">VALUE<` before /｜DSML｜parameter, found " +
                    shown(param.between));
        }
        for (const auto& q : parameters) {
          if (q.name == p->name) error(param_at, "duplicate parameter name", "parameter " + shown(p->name) + " appears twice");
        }
        parameters.push_back(*p);
        const std::size_t close_at = index;
        read = read_until(text, index, {t::parameter, t::invoke_end});
        index = read.next;
        if (read.between != ">\n") {
          error(close_at, "parameter format error",
                "expected \">\\n\" then <｜DSML｜parameter or </｜DSML｜invoke, found " + shown(text.substr(close_at, 40)));
        }
      }
      out.tool_calls.push_back({*name, detail::arguments_json(parameters)});
    }
    const std::size_t tail_at = index;
    const auto tail = read_until(text, index, {t::eos});
    index = tail.next;
    if (!tail.between.empty()) {
      error(tail_at, "unexpected content after tool calls",
            "expected <｜end▁of▁sentence｜> or nothing, found " + shown(tail.between));
    }
  }
  if (index != text.size()) {
    error(index, "unexpected content at end", "nothing may follow <｜end▁of▁sentence｜>, found " + shown(text.substr(index)));
  }
  for (const std::string_view special : {t::bos, t::eos, t::think_begin, t::think_end, t::dsml}) {
    if (const std::size_t p = out.reasoning.find(special); p != std::string::npos) {
      error(p, "unexpected special token in content", std::string(special) + " inside the reasoning");
    }
    if (const std::size_t p = out.content.find(special); p != std::string::npos) {
      error(content_at + p, "unexpected special token in content", std::string(special) + " inside the content");
    }
  }
  return out;
}

/// \brief parse_completion() of a completion's token ids, decoded with `tokenizer` keeping the
///        special tokens (the eos is part of the grammar, a bos in the reply an error).
/// \throws Error(invalid_argument) for an id without a token, and as parse_completion().
inline ChatOutput parse_completion(const Tokenizer& tokenizer, std::span<const std::int32_t> ids, bool thinking) {
  return parse_completion(tokenizer.decode(ids, /*skip_special_tokens=*/false), thinking);
}

/// \brief Parses a reply as it is generated, chunk by chunk, into ChatOutputDelta values — for
///        ChatOutputParser (which feeds it decoded tokens).
///
/// Whatever the chunks, the reply it builds is the one parse_completion() returns for their
/// concatenation whenever that succeeds; text deltas never hold markup (a marker split across
/// chunks is held back until it is complete or ruled out, and so is a character split across
/// chunks); a call is delivered when its `</｜DSML｜invoke` arrives. Malformed output never throws:
/// from the point where the text breaks a rule of parse_completion() (what was delivered stays
/// delivered), the rest — the held-back markup included — is handed back as content, as generated,
/// without the eos; state() is then ChatOutputState::malformed and malformed_reason() says what
/// broke. Two ends that parse_completion() refuses are not malformed here: a reply that stops
/// (finish()) before `</think>` or before the eos of an answer without tool calls — a generation
/// cut off by its token limit; complete() tells them apart.
class CompletionScanner {
 public:
  /// \param thinking the reply starts with reasoning (the prompt ended with `<think>`)
  explicit CompletionScanner(bool thinking = false) { reset(thinking); }

  /// \brief Forgets the reply and starts a new one.
  void reset(bool thinking) {
    phase_ = thinking ? Phase::reasoning : Phase::content;
    buf_.clear();
    pos_ = 0;
    resume_ = 0;
    consumed_ = 0;
    out_ = {};
    name_.clear();
    parameters_.clear();
    reason_.clear();
    complete_ = false;
    finished_ = false;
  }

  /// \brief Adds generated text; what it completes is appended to `delta`. Never throws.
  void push(std::string_view text, ChatOutputDelta& delta) {
    if (text.empty()) return;
    if (finished_ && phase_ != Phase::passthrough) {
      malformed(buf_.size(), "text after the end of the reply");
      finished_ = false;
    }
    buf_ += text;
    advance(false, delta);
  }

  /// \brief Ends the reply (the eos, or the generation stopped): what was held back is delivered.
  ///        Never throws.
  void finish(ChatOutputDelta& delta) {
    advance(true, delta);
    if (phase_ == Phase::reasoning) emit_reasoning(buf_.size(), delta);
    if (phase_ == Phase::content || phase_ == Phase::passthrough) emit_content(buf_.size(), delta);
    finished_ = true;
  }

  /// \brief Everything parsed so far.
  const ChatOutput& output() const noexcept { return out_; }

  /// \brief Where the scanner is (ended after finish() or the eos, malformed once the reply broke).
  ChatOutputState state() const noexcept {
    switch (phase_) {
      case Phase::reasoning: return finished_ ? ChatOutputState::ended : ChatOutputState::reasoning;
      case Phase::content: return finished_ ? ChatOutputState::ended : ChatOutputState::content;
      case Phase::block_open:
      case Phase::after_block: return finished_ ? ChatOutputState::ended : ChatOutputState::tool_calls;
      case Phase::invoke_name: return finished_ ? ChatOutputState::ended : ChatOutputState::tool_name;
      case Phase::parameter:
      case Phase::parameter_close: return finished_ ? ChatOutputState::ended : ChatOutputState::tool_arguments;
      case Phase::ended: return ChatOutputState::ended;
      case Phase::passthrough: return ChatOutputState::malformed;
    }
    return ChatOutputState::malformed;
  }

  /// \brief What broke the format, with its byte offset in the reply ("" while it holds).
  const std::string& malformed_reason() const noexcept { return reason_; }

  /// \brief Whether the reply so far is one parse_completion() accepts as a whole: it ended with
  ///        the eos (or after a tool-call block) and nothing broke the format.
  bool complete() const noexcept { return complete_ && reason_.empty(); }

 private:
  enum class Phase {
    reasoning,        // text before </think>
    content,          // the answer
    block_open,       // in the block: expecting ">\n" then an invoke or the block's end
    invoke_name,      // after <｜DSML｜invoke: ` name="NAME">\n` up to a parameter or </｜DSML｜invoke
    parameter,        // after <｜DSML｜parameter: up to /｜DSML｜parameter
    parameter_close,  // expecting ">\n" then a parameter or </｜DSML｜invoke
    after_block,      // after </｜DSML｜function_calls>: only the eos
    ended,            // after the eos
    passthrough,      // malformed: everything is content
  };

  struct Search {
    bool found = false;     // an occurrence that no later text can pre-empt
    std::size_t pos = 0;    // where it starts
    std::size_t which = 0;  // which pattern
    std::size_t safe = 0;   // no pattern can start before this position
  };

  // The earliest occurrence in buf_ from pos_ of any of `patterns` (ties: the earlier listed),
  // decided only when no pattern can still complete at or before it once more text arrives.
  Search search(std::span<const std::string_view> patterns, bool at_end) {
    Search r;
    r.pos = std::string_view::npos;
    const std::string_view text = buf_;
    std::size_t longest = 0;
    for (const auto p : patterns) longest = std::max(longest, p.size());
    const std::size_t from = std::max(pos_, resume_);
    for (std::size_t i = 0; i < patterns.size(); ++i) {
      const std::size_t p = text.find(patterns[i], from);
      if (p < r.pos) {
        r.pos = p;
        r.which = i;
      }
    }
    std::size_t safe = r.pos == std::string_view::npos ? text.size() : r.pos;
    bool blocked = false;
    if (!at_end) {
      for (std::size_t i = 0; i < patterns.size(); ++i) {
        const std::string_view p = patterns[i];
        const std::size_t first = text.size() >= p.size() ? text.size() - p.size() + 1 : 0;
        for (std::size_t q = std::max(first, pos_); q < text.size(); ++q) {
          if (p.starts_with(text.substr(q))) {
            safe = std::min(safe, q);
            if (q < r.pos || (q == r.pos && i < r.which)) blocked = true;
            break;
          }
        }
      }
    }
    r.found = r.pos != std::string_view::npos && !blocked;
    r.safe = safe;
    // Complete occurrences starting before here would have been found: the next search of this
    // read resumes there.
    if (!r.found) resume_ = text.size() >= longest ? std::max(pos_, text.size() - longest + 1) : pos_;
    return r;
  }

  void new_read(std::size_t at) {
    pos_ = at;
    resume_ = at;
  }

  // Drops buf_[0, n): it has been delivered or was markup.
  void drop(std::size_t n) {
    buf_.erase(0, n);
    consumed_ += n;
    new_read(0);
  }

  void emit_reasoning(std::size_t n, ChatOutputDelta& delta) {
    out_.reasoning.append(buf_, 0, n);
    delta.reasoning.append(buf_, 0, n);
    drop(n);
  }
  void emit_content(std::size_t n, ChatOutputDelta& delta) {
    out_.content.append(buf_, 0, n);
    delta.content.append(buf_, 0, n);
    drop(n);
  }

  // The rest of the reply is content: from `at` in buf_ on (what comes before it was delivered).
  void malformed(std::size_t at, const std::string& what) {
    reason_ = "DeepSeek-V3.2 reply: " + what + " at byte " + std::to_string(consumed_ + at);
    phase_ = Phase::passthrough;
    name_.clear();
    parameters_.clear();
    new_read(0);
  }

  void deliver_call(ChatOutputDelta& delta) {
    ToolCall call{std::move(name_), detail::arguments_json(parameters_)};
    name_.clear();
    parameters_.clear();
    out_.tool_calls.push_back(call);
    delta.tool_calls.push_back(std::move(call));
  }

  // Expects, at pos_, ">\n" followed by one of `next` (a read of the module whose text must be
  // ">\n"). Returns the index of the one found, -1 to wait for more text, -2 when it cannot come.
  int expect_newline_then(std::initializer_list<std::string_view> next) {
    const std::string_view rest = std::string_view(buf_).substr(pos_);
    bool possible = false;
    int k = 0;
    for (const std::string_view n : next) {
      const std::string full = ">\n" + std::string(n);
      if (rest.starts_with(full)) return k;
      if (std::string_view(full).starts_with(rest)) possible = true;
      ++k;
    }
    return possible ? -1 : -2;
  }

  // Text between pos_ and the end that can no longer start as `prefix` (after Python whitespace
  // when `space`): the read's text will not match.
  bool cannot_start_with(std::string_view prefix, bool space) const {
    std::string_view rest = std::string_view(buf_).substr(pos_);
    if (space) {
      bool incomplete = false;
      rest.remove_prefix(detail::python_space_prefix(rest, &incomplete));
      if (incomplete) return false;
    }
    const std::size_t n = std::min(rest.size(), prefix.size());
    return rest.substr(0, n) != prefix.substr(0, n);
  }

  void advance(bool at_end, ChatOutputDelta& delta) {
    namespace t = tokens;
    static constexpr std::array<std::string_view, 6> reasoning_patterns = {t::think_end, t::function_calls_start, t::bos,
                                                                           t::eos,       t::think_begin,          t::dsml};
    static constexpr std::array<std::string_view, 6> content_patterns = {t::eos,       t::function_calls_start, t::bos,
                                                                         t::think_begin, t::think_end,          t::dsml};
    static constexpr std::array<std::string_view, 1> eos_pattern = {t::eos};
    static constexpr std::array<std::string_view, 2> name_stops = {t::parameter, t::invoke_end};
    static constexpr std::array<std::string_view, 1> value_stop = {t::parameter_end};
    while (true) {
      switch (phase_) {
        case Phase::reasoning:
        case Phase::content: {
          const bool reasoning = phase_ == Phase::reasoning;
          const Search s = search(reasoning ? std::span<const std::string_view>(reasoning_patterns)
                                            : std::span<const std::string_view>(content_patterns),
                                  at_end);
          if (!s.found) {
            std::size_t n = s.safe;
            if (!at_end && n == buf_.size()) n -= utf8::truncated_tail_length(buf_);
            if (reasoning) emit_reasoning(n, delta);
            else emit_content(n, delta);
            return;
          }
          if (reasoning) emit_reasoning(s.pos, delta);
          else emit_content(s.pos, delta);
          if (reasoning && s.which == 0) {  // </think>
            drop(t::think_end.size());
            phase_ = Phase::content;
          } else if (!reasoning && s.which == 0) {  // the eos
            drop(t::eos.size());
            phase_ = Phase::ended;
            complete_ = true;
          } else if (!reasoning && s.which == 1) {  // the tool-call block: kept until delivered
            new_read(t::function_calls_start.size());
            phase_ = Phase::block_open;
          } else {
            const std::string_view found = (reasoning ? reasoning_patterns : content_patterns)[s.which];
            malformed(0, found == t::function_calls_start
                             ? std::string("a tool-call block inside the reasoning (before </think>)")
                             : detail::shown(found) + " inside the " + (reasoning ? "reasoning" : "content"));
          }
          break;
        }
        case Phase::block_open: {
          if (at_end && pos_ == buf_.size()) {  // cut off between calls: accepted
            complete_ = true;
            drop(buf_.size());
            phase_ = Phase::ended;
            return;
          }
          const int next = expect_newline_then({t::invoke, t::function_calls_end});
          if (next == -1 && !at_end) return;
          if (next < 0) {
            malformed(pos_, "expected \">\\n\" then <｜DSML｜invoke or </｜DSML｜function_calls>, found " +
                                detail::shown(std::string_view(buf_).substr(pos_)));
          } else if (next == 0) {
            new_read(pos_ + 2 + t::invoke.size());
            phase_ = Phase::invoke_name;
          } else {
            drop(pos_ + 2 + t::function_calls_end.size());
            phase_ = Phase::after_block;
          }
          break;
        }
        case Phase::invoke_name: {
          const Search s = search(name_stops, at_end);
          const std::size_t end = s.found ? s.pos : buf_.size();
          if (!s.found && !at_end) {
            if (cannot_start_with("name=\"", true)) {
              malformed(pos_, "a call's name must follow <｜DSML｜invoke as ` name=\"NAME\">`, found " +
                               detail::shown(std::string_view(buf_).substr(pos_)));
              break;
            }
            return;
          }
          std::optional<std::string> name = detail::match_invoke_name(std::string_view(buf_).substr(pos_, end - pos_));
          if (!name) {
            malformed(pos_, "a call's name must follow <｜DSML｜invoke as ` name=\"NAME\">` and a newline, found " +
                             detail::shown(std::string_view(buf_).substr(pos_, end - pos_)));
            break;
          }
          name_ = std::move(*name);
          if (!s.found) {  // cut off after the invoke's opening line: accepted
            deliver_call(delta);
            complete_ = true;
            drop(buf_.size());
            phase_ = Phase::ended;
            return;
          }
          if (s.which == 0) {
            new_read(s.pos + t::parameter.size());
            phase_ = Phase::parameter;
          } else {
            deliver_call(delta);
            drop(s.pos + t::invoke_end.size());
            phase_ = Phase::block_open;
          }
          break;
        }
        case Phase::parameter: {
          const Search s = search(value_stop, at_end);
          if (!s.found) {
            if (at_end) {
              malformed(pos_, "the reply ends inside a parameter");
              break;
            }
            if (cannot_start_with(" name=\"", false)) {
              malformed(pos_, "a parameter must follow <｜DSML｜parameter as ` name=\"KEY\" string=\"true|false\">`, found " +
                               detail::shown(std::string_view(buf_).substr(pos_)));
              break;
            }
            return;
          }
          std::optional<detail::Parameter> p = detail::match_parameter(std::string_view(buf_).substr(pos_, s.pos - pos_));
          if (!p) {
            malformed(pos_, "expected ` name=\"KEY\" string=\"true|false\">VALUE<` before /｜DSML｜parameter, found " +
                             detail::shown(std::string_view(buf_).substr(pos_, s.pos - pos_)));
            break;
          }
          bool duplicate = false;
          for (const auto& q : parameters_) duplicate |= q.name == p->name;
          if (duplicate) {
            malformed(pos_, "parameter " + detail::shown(p->name) + " appears twice in one call");
            break;
          }
          parameters_.push_back(std::move(*p));
          new_read(s.pos + t::parameter_end.size());
          phase_ = Phase::parameter_close;
          break;
        }
        case Phase::parameter_close: {
          if (at_end && std::string_view(buf_).substr(pos_) == ">\n") {  // cut off after a parameter: accepted
            deliver_call(delta);
            complete_ = true;
            drop(buf_.size());
            phase_ = Phase::ended;
            return;
          }
          const int next = expect_newline_then({t::parameter, t::invoke_end});
          if (next == -1 && !at_end) return;
          if (next < 0) {
            malformed(pos_, "expected \">\\n\" then <｜DSML｜parameter or </｜DSML｜invoke, found " +
                             detail::shown(std::string_view(buf_).substr(pos_)));
          } else if (next == 0) {
            new_read(pos_ + 2 + t::parameter.size());
            phase_ = Phase::parameter;
          } else {
            deliver_call(delta);
            drop(pos_ + 2 + t::invoke_end.size());
            phase_ = Phase::block_open;
          }
          break;
        }
        case Phase::after_block: {
          if (buf_.starts_with(t::eos)) {
            drop(t::eos.size());
            phase_ = Phase::ended;
            complete_ = true;
          } else if (buf_.empty() && at_end) {  // a block without the eos: accepted
            complete_ = true;
            phase_ = Phase::ended;
            return;
          } else if (t::eos.starts_with(buf_) && !at_end) {
            return;
          } else {
            malformed(0, "only <｜end▁of▁sentence｜> may follow </｜DSML｜function_calls>, found " + detail::shown(buf_));
          }
          break;
        }
        case Phase::ended: {
          if (buf_.empty()) return;
          malformed(0, "text after <｜end▁of▁sentence｜>: " + detail::shown(buf_));
          break;
        }
        case Phase::passthrough: {
          const Search s = search(eos_pattern, at_end);
          if (!s.found) {
            std::size_t n = s.safe;
            if (!at_end && n == buf_.size()) n -= utf8::truncated_tail_length(buf_);
            emit_content(n, delta);
            return;
          }
          emit_content(s.pos, delta);
          drop(t::eos.size());
          break;
        }
      }
    }
  }

  Phase phase_ = Phase::content;
  std::string buf_;             // text not delivered yet: a held-back tail, or the block since its last call
  std::size_t pos_ = 0;         // where the current read starts in buf_
  std::size_t resume_ = 0;      // where the current read's search for a stop resumes
  std::size_t consumed_ = 0;    // bytes of the reply before buf_
  ChatOutput out_;
  std::string name_;                             // the call being read
  std::vector<detail::Parameter> parameters_;    // its arguments so far
  std::string reason_;          // what broke the format
  bool complete_ = false;       // ended where parse_completion() would accept
  bool finished_ = false;       // finish() was called
};

/// \brief The reply as the module returns it, in its key order: `{"role": "assistant", "content",
///        "reasoning_content", "tool_calls": [{"type": "function", "function": {"name",
///        "arguments"}}]}`.
inline nlohmann::ordered_json message_json(const ChatOutput& reply) {
  nlohmann::ordered_json calls = nlohmann::ordered_json::array();
  for (const ToolCall& call : reply.tool_calls) calls.push_back(call);
  return nlohmann::ordered_json{{"role", "assistant"},
                                {"content", reply.content},
                                {"reasoning_content", reply.reasoning},
                                {"tool_calls", std::move(calls)}};
}

/// @}

}  // namespace dsv32::deepseek_v3_2
