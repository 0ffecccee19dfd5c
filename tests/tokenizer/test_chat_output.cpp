// dsv32::ChatOutputParser on fixed token streams: the assistant replies inside DeepSeek-V3.2-Exp's
// chat_cases.json ids (whose expected content and tool calls are the cases' messages), a reasoning
// stream from encode_cases.json, pushed id by id and as text split at every position; and the
// errors for out-of-place markers.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "deepseek.hpp"
#include "dsv32/tokenizer/chat_output.hpp"

using Ids = std::vector<std::int32_t>;
using dsv32::ChatMessage;
using dsv32::ChatOutput;
using dsv32::ChatOutputDelta;
using dsv32::ChatOutputParser;
using dsv32::ChatOutputState;
using dsv32::ToolCall;

namespace {

using deepseek::v3_2_exp_tokenizer;

std::int32_t id_of(std::string_view token) { return v3_2_exp_tokenizer().token_to_id(token).value(); }

/// A reply of chat_cases.json: its ids (after <｜Assistant｜> or the last tool output, up to and
/// including <｜end▁of▁sentence｜>) and the message it renders.
struct Reply {
  Ids ids;
  ChatMessage message;
  bool thinking = false;
};

std::vector<Reply> replies_of_chat_cases() {
  const std::int32_t user = id_of("<｜User｜>");
  const std::int32_t assistant = id_of("<｜Assistant｜>");
  const std::int32_t output_begin = id_of("<｜tool▁output▁begin｜>");
  const std::int32_t output_end = id_of("<｜tool▁output▁end｜>");
  const std::int32_t eos = v3_2_exp_tokenizer().eos_id().value();
  std::vector<Reply> replies;
  for (const auto& c : deepseek::cases("chat_cases.json", deepseek::v3_2_exp).at("cases")) {
    const Ids ids = c.at("ids");
    std::vector<Ids> segments;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const bool starts = ids[i] == assistant || (ids[i] == output_end && (i + 1 == ids.size() || ids[i + 1] != output_begin));
      if (!starts) continue;
      std::size_t j = i + 1;
      while (j < ids.size() && ids[j] != eos && ids[j] != user && ids[j] != assistant && ids[j] != output_begin) ++j;
      if (j < ids.size() && ids[j] == eos) segments.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                                                 ids.begin() + static_cast<std::ptrdiff_t>(j) + 1);
    }
    std::vector<ChatMessage> assistant_messages;
    for (const ChatMessage& m : dsv32::chat_messages_from_json(c.at("messages"))) {
      if (m.role == "assistant") assistant_messages.push_back(m);
    }
    REQUIRE(segments.size() == assistant_messages.size());
    for (std::size_t k = 0; k < segments.size(); ++k) {
      replies.push_back({segments[k], assistant_messages[k], c.at("thinking").get<bool>()});
    }
  }
  return replies;
}

/// Pushes `ids` one at a time; checks that the deltas add up to the output and that each tool call
/// arrives with its <｜tool▁call▁end｜>.
ChatOutput parse_ids(const Ids& ids, ChatOutputState start) {
  ChatOutputParser parser(v3_2_exp_tokenizer(), start);
  ChatOutput sum;
  const std::int32_t call_end = id_of("<｜tool▁call▁end｜>");
  for (std::int32_t id : ids) {
    const ChatOutputDelta d = parser.push(id);
    CHECK(d.tool_calls.size() == (id == call_end ? 1u : 0u));
    sum.reasoning += d.reasoning;
    sum.content += d.content;
    sum.tool_calls.insert(sum.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
    CHECK(parser.output() == sum);
  }
  CHECK(parser.finish().empty());
  CHECK(parser.state() == ChatOutputState::ended);
  return parser.output();
}

/// Pushes `chunks` as text; checks that the deltas add up to the output and are UTF-8.
ChatOutput parse_text(const std::vector<std::string_view>& chunks, ChatOutputState start) {
  ChatOutputParser parser(start);
  ChatOutput sum;
  auto add = [&](const ChatOutputDelta& d) {
    CHECK(dsv32::utf8::is_valid(d.reasoning));
    CHECK(dsv32::utf8::is_valid(d.content));
    sum.reasoning += d.reasoning;
    sum.content += d.content;
    sum.tool_calls.insert(sum.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  };
  for (std::string_view chunk : chunks) add(parser.push_text(chunk));
  add(parser.finish());
  CHECK(parser.output() == sum);
  return parser.output();
}

/// The text parser's output for `text` split at every byte position into two pushes, and pushed
/// one byte at a time: all must equal `expected`. Returns the number of splits checked.
std::size_t check_text_splits(const std::string& text, ChatOutputState start, const ChatOutput& expected) {
  std::size_t checked = 0;
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    const std::string_view all = text;
    INFO("split at byte " << cut);
    CHECK(parse_text({all.substr(0, cut), all.substr(cut)}, start) == expected);
    ++checked;
  }
  std::vector<std::string_view> bytes;
  for (std::size_t i = 0; i < text.size(); ++i) bytes.push_back(std::string_view(text).substr(i, 1));
  CHECK(parse_text(bytes, start) == expected);
  return checked;
}

using deepseek::error_of;

}  // namespace

TEST_CASE("chat output: every assistant reply of DeepSeek-V3.2-Exp's chat_cases.json parses to its message") {
  const std::vector<Reply> replies = replies_of_chat_cases();
  REQUIRE(replies.size() == 32);
  std::size_t with_calls = 0;
  std::size_t checked = 0;
  for (const Reply& r : replies) {
    // A prefix message rendered in thinking mode opens with <think>: it is not a finished reply.
    if (r.message.prefix && r.thinking) continue;
    ChatMessage expected = r.message;
    expected.prefix = false;
    // The history keeps only what follows </think> (for replies after a user message).
    if (const auto end = expected.content.find("</think>"); end != std::string::npos && r.ids.front() == id_of("</think>")) {
      expected.content.erase(0, end + 8);
    }
    const std::string text = v3_2_exp_tokenizer().decode(r.ids);
    INFO("reply: " << text);
    const ChatOutput by_ids = parse_ids(r.ids, ChatOutputState::content);
    CHECK(by_ids.message() == expected);
    CHECK(by_ids.reasoning.empty());
    CHECK(check_text_splits(text, ChatOutputState::content, by_ids) == text.size() + 1);
    with_calls += !expected.tool_calls.empty();
    ++checked;
  }
  CHECK(checked == 31);
  CHECK(with_calls == 10);
}

TEST_CASE("chat output: reasoning, then the answer (encode_cases.json's thinking text)") {
  // "<think>\nLet me reason.\n</think>\n\nThe answer is 42." and eos
  const Ids ids = {128798, 201, 5718, 678, 3986, 603, 128799, 271, 671, 3287, 344, 223, 3180, 16, 1};
  const ChatOutput expected{"\nLet me reason.\n", "\n\nThe answer is 42.", {}};
  // The reply opens with <think> (a prompt that ended in </think> or <｜Assistant｜>)...
  CHECK(parse_ids(ids, ChatOutputState::content) == expected);
  // ... or the prompt ended with <think> (thinking mode), and the reply is the rest.
  const Ids after_think(ids.begin() + 1, ids.end());
  CHECK(parse_ids(after_think, ChatOutputState::reasoning) == expected);
  const std::string text = "<think>\nLet me reason.\n</think>\n\nThe answer is 42.<｜end▁of▁sentence｜>";
  CHECK(v3_2_exp_tokenizer().decode(ids) == text);
  CHECK(check_text_splits(text, ChatOutputState::content, expected) == text.size() + 1);
  CHECK(check_text_splits(text.substr(7), ChatOutputState::reasoning, expected) == text.size() - 6);
  CHECK(expected == ChatOutput{expected.reasoning, expected.content, {}});
  // The message for the conversation carries the reasoning too (DeepSeek-V3.2's encoding prints it
  // in tool-calling turns; the V3.2-Exp template ignores it).
  ChatMessage answer{"assistant", "\n\nThe answer is 42."};
  answer.reasoning_content = "\nLet me reason.\n";
  CHECK(parse_ids(after_think, ChatOutputState::reasoning).message() == answer);
}

TEST_CASE("chat output: reasoning, an answer and two tool calls, as the tokens arrive") {
  // Reasoning (from encode_cases.json), then case 9's reply: "</think>Checking." and two calls.
  Ids ids = {201, 5718, 678, 3986, 603};
  const std::vector<Reply> replies = replies_of_chat_cases();
  const Reply* checking = nullptr;
  for (const Reply& r : replies) {
    if (r.message.content == "Checking." && r.message.tool_calls.size() == 2 && r.message.tool_calls[1].name == "calc") {
      checking = &r;
    }
  }
  REQUIRE(checking != nullptr);
  ids.insert(ids.end(), checking->ids.begin(), checking->ids.end());
  const ChatOutput expected{"\nLet me reason.\n",
                            "Checking.",
                            {{"search", R"({"query": "DeepSeek V3.2", "top_k": 3})"}, {"calc", R"({"expr": "2+2"})"}}};
  CHECK(parse_ids(ids, ChatOutputState::reasoning) == expected);

  // The states along the way, and each call in the delta of its <｜tool▁call▁end｜>.
  ChatOutputParser parser(v3_2_exp_tokenizer(), ChatOutputState::reasoning);
  std::vector<ChatOutputState> states;
  std::vector<std::size_t> call_positions;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const ChatOutputDelta d = parser.push(ids[i]);
    if (!d.tool_calls.empty()) call_positions.push_back(i);
    if (states.empty() || states.back() != parser.state()) states.push_back(parser.state());
  }
  using S = ChatOutputState;
  CHECK(states == std::vector<S>{S::reasoning, S::content, S::tool_calls, S::tool_name, S::tool_arguments,
                                 S::tool_calls, S::tool_name, S::tool_arguments, S::tool_calls, S::content, S::ended});
  REQUIRE(call_positions.size() == 2);
  CHECK(ids[call_positions[0]] == id_of("<｜tool▁call▁end｜>"));
  CHECK(ids[call_positions[1]] == id_of("<｜tool▁call▁end｜>"));
  CHECK(call_positions[1] + 3 == ids.size());  // then <｜tool▁calls▁end｜> and eos

  const std::string text = v3_2_exp_tokenizer().decode(ids);
  CHECK(check_text_splits(text, ChatOutputState::reasoning, expected) == text.size() + 1);
}

TEST_CASE("chat output: text with multi-byte characters is never cut inside a character") {
  const std::string text = "思考😀</think>答案：😀<｜tool▁calls▁begin｜>\n<｜tool▁call▁begin｜>查询<｜tool▁sep｜>{\"城市\": \"北京\"}"
                           "<｜tool▁call▁end｜>\n<｜tool▁calls▁end｜>";
  const ChatOutput expected{"思考😀", "答案：😀", {{"查询", "{\"城市\": \"北京\"}"}}};
  CHECK(check_text_splits(text, ChatOutputState::reasoning, expected) == text.size() + 1);
  // A '<' that starts no marker is text, at once or when the next byte rules the marker out.
  CHECK(parse_text({"a < b <", "= c <thin", "g>"}, ChatOutputState::content) == ChatOutput{"", "a < b <= c <thing>", {}});
  ChatOutputParser parser;
  CHECK(parser.push_text("x <").content == "x ");
  CHECK(parser.push_text("y").content == "<y");
  CHECK(parser.push_text("<｜tool▁").content.empty());
  CHECK(parser.finish().content == "<｜tool▁");  // held back, then given out as text at the end
}

TEST_CASE("chat output: ids the tokenizer lacks, and markers split from characters") {
  ChatOutputParser parser(v3_2_exp_tokenizer(), ChatOutputState::content);
  CHECK(parser.push(28927).content.empty());  // the first half of 😀
  CHECK_THROWS_WITH_AS((void)parser.push(129000), doctest::Contains("token id 129000"), dsv32::Error);
  CHECK(parser.push(225).content == "😀");  // the refused id changed nothing
  CHECK(parser.push(28927).content.empty());
  // A marker ends the character: it becomes U+FFFD, as Tokenizer::decode would give.
  CHECK(parser.push(id_of("<｜tool▁calls▁begin｜>")).content == "\xEF\xBF\xBD");
  CHECK(parser.state() == ChatOutputState::tool_calls);
}

TEST_CASE("chat output: start states, reset, and input after the end") {
  CHECK(ChatOutputParser::start_state("<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>") ==
        ChatOutputState::reasoning);
  CHECK(ChatOutputParser::start_state("<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>") ==
        ChatOutputState::content);
  CHECK(ChatOutputParser::start_state("") == ChatOutputState::content);
  CHECK_THROWS_WITH_AS(ChatOutputParser{ChatOutputState::tool_name}, doctest::Contains("starts in the reasoning or content state"),
                       dsv32::Error);

  ChatOutputParser parser(v3_2_exp_tokenizer());
  CHECK(parser.push(19923).content == "Hello");
  CHECK(parser.push(1).empty());
  CHECK(parser.state() == ChatOutputState::ended);
  CHECK(error_of([&] { (void)parser.push(19923); }) ==
        "dsv32 [state]: ChatOutputParser: input after the end of the reply (call reset() for a new one)");
  CHECK(parser.finish().empty());
  parser.reset(ChatOutputState::reasoning);
  CHECK(parser.output() == ChatOutput{});
  CHECK(parser.push(19923).reasoning == "Hello");

  ChatOutputParser text_only;
  CHECK(error_of([&] { (void)text_only.push(19923); }) ==
        "dsv32 [state]: ChatOutputParser::push(id): this parser has no tokenizer (use push_text)");
  CHECK(error_of([&] { (void)text_only.push_text("done<｜end▁of▁sentence｜>more"); }) ==
        "dsv32 [invalid_argument]: chat output: found text after <｜end▁of▁sentence｜>: \"more\" at byte 31 of the "
        "reply (expected nothing more)");
  // The tolerated markers: a </think> before any answer without reasoning, a repeated <think>.
  CHECK(parse_text({"</think>Hi"}, ChatOutputState::content) == ChatOutput{"", "Hi", {}});
  CHECK(parse_text({"<think>r</think>a"}, ChatOutputState::reasoning) == ChatOutput{"r", "a", {}});
}

TEST_CASE("chat output: out-of-place markers are errors naming what was expected") {
  auto text_error = [](std::string_view text, ChatOutputState start = ChatOutputState::content) {
    ChatOutputParser parser(start);
    return error_of([&] {
      (void)parser.push_text(text);
      (void)parser.finish();
    });
  };
  CHECK(text_error("Hello<｜tool▁call▁begin｜>f") ==
        "dsv32 [invalid_argument]: chat output: found <｜tool▁call▁begin｜> at byte 5 of the reply (expected answer "
        "text, <｜tool▁calls▁begin｜> or <｜end▁of▁sentence｜>)");
  CHECK(text_error("<｜tool▁calls▁begin｜>x") ==
        "dsv32 [invalid_argument]: chat output: found text \"x\" at byte 28 of the reply (expected "
        "<｜tool▁call▁begin｜> or <｜tool▁calls▁end｜>)");
  CHECK(text_error("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁call▁end｜>") ==
        "dsv32 [invalid_argument]: chat output: found <｜tool▁call▁end｜> at byte 56 of the reply (expected the "
        "tool's name, then <｜tool▁sep｜>)");
  CHECK(text_error("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜end▁of▁sentence｜>") ==
        "dsv32 [invalid_argument]: chat output: found <｜end▁of▁sentence｜> at byte 76 of the reply (expected the "
        "arguments, then <｜tool▁call▁end｜>)");
  CHECK(text_error("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}") ==
        "dsv32 [invalid_argument]: chat output: found the end of the reply inside tool calls at byte 76 of the reply "
        "(expected the arguments, then <｜tool▁call▁end｜>)");
  CHECK(text_error("answer</think>") ==
        "dsv32 [invalid_argument]: chat output: found </think> at byte 6 of the reply (expected answer text, "
        "<｜tool▁calls▁begin｜> or <｜end▁of▁sentence｜>)");
  CHECK(text_error("r</think>a<think>", ChatOutputState::reasoning).find("found <think> at byte 10") != std::string::npos);
  CHECK(text_error("reasoning<｜tool▁calls▁begin｜>", ChatOutputState::reasoning) ==
        "dsv32 [invalid_argument]: chat output: found <｜tool▁calls▁begin｜> at byte 9 of the reply (expected "
        "reasoning text, </think> or <｜end▁of▁sentence｜>)");
  CHECK(text_error("<｜tool▁calls▁end｜>").find("found <｜tool▁calls▁end｜> at byte 0") != std::string::npos);
  CHECK(text_error("<｜tool▁sep｜>").find("found <｜tool▁sep｜> at byte 0") != std::string::npos);

  // By id: "😀<think>中文</think>" (encode_cases.json) has <think> after answer text.
  ChatOutputParser parser(v3_2_exp_tokenizer());
  const Ids ids = {28927, 225, 128798, 21134, 128799};
  CHECK(parser.push(ids[0]).empty());
  CHECK(parser.push(ids[1]).content == "😀");
  CHECK(error_of([&] { (void)parser.push(ids[2]); }) ==
        "dsv32 [invalid_argument]: chat output: found <think> at byte 4 of the reply (expected answer text, "
        "<｜tool▁calls▁begin｜> or <｜end▁of▁sentence｜>)");
  CHECK(parser.state() == ChatOutputState::failed);
  CHECK(parser.output().content == "😀");  // what was parsed stays
  CHECK(error_of([&] { (void)parser.push(ids[3]); }) ==
        "dsv32 [state]: ChatOutputParser: input after an error (call reset() for a new reply)");
  parser.reset();
  CHECK(parser.push(ids[3]).content == "中文");
}
