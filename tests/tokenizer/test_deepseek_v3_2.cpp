// DeepSeek-V3.2's chat encoding and its replies against DeepSeek's case files
// (tests/data/tokenizer/deepseek_v3_2, from ../shared/tokenizer/deepseek_v3_2: texts from the model's
// encoding_dsv32.py, ids from Hugging Face tokenizers): every conversation renders to its text and
// ids or is refused; every completion parses to its message or is refused, by the strict parser and
// by the streaming one fed at every byte split, byte by byte and token by token. Then the rules the
// cases do not reach, the Python JSON forms, and how the format is chosen.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../support/temp_dir.hpp"
#include "deepseek.hpp"
#include "dsv32/tokenizer/chat_output.hpp"
#include "dsv32/tokenizer/deepseek_v3_2_completion.hpp"
#include "dsv32/tokenizer/deepseek_v3_2_encoding.hpp"
#include "dsv32/tokenizer/python_json.hpp"

using Ids = std::vector<std::int32_t>;

namespace {

using dsv32::ChatFormat;
using dsv32::ChatMessage;
using dsv32::ChatOutput;
using dsv32::ChatOutputDelta;
using dsv32::ChatOutputParser;
using dsv32::ChatOutputState;
using dsv32::ToolCall;
using nlohmann::ordered_json;
namespace v32 = dsv32::deepseek_v3_2;
namespace pyjson = dsv32::python_json;
using deepseek::error_of;

const std::string v3_2_folder = "deepseek_v3_2";

/// A case file of deepseek_v3_2/, read with key order kept (the tools block prints keys in order).
const ordered_json& v3_2_cases(const std::string& file) {
  static std::map<std::string, ordered_json> loaded;
  auto it = loaded.find(file);
  if (it == loaded.end()) {
    std::ifstream in(deepseek::data_dir(v3_2_folder) + "/" + file, std::ios::binary);
    const std::string text{std::istreambuf_iterator<char>(in), {}};
    REQUIRE(!text.empty());
    it = loaded.emplace(file, pyjson::loads(text, file)).first;
  }
  return it->second;
}

/// The tokenizer: V3.2-Exp's tokenizer.json, which DeepSeek-V3.2 shares.
const dsv32::Tokenizer& v32_tokenizer() { return deepseek::v3_2_exp_tokenizer(); }

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

/// What our message says for each refusal of the module (its messages carry Python reprs).
std::string expected_refusal(const std::string& module_error) {
  if (module_error.find("out of range") != std::string::npos) return "drop_thinking";
  if (module_error.find("without reasoning_content/tool_calls") != std::string::npos)
    return "needs reasoning_content or tool_calls";
  if (module_error.find("Invalid messages at") != std::string::npos) return "a tool message must follow an assistant message";
  if (module_error.find("No tool calls but found tool output") != std::string::npos) return "there is no tool call for it";
  return "(unexpected module error: " + module_error + ")";
}

bool has_dsml_markup(const std::string& s) {
  for (const std::string_view m : {v32::tokens::dsml, v32::tokens::think_begin, v32::tokens::think_end,
                                   v32::tokens::eos, v32::tokens::bos}) {
    if (s.find(m) != std::string::npos) return true;
  }
  return false;
}

/// Feeds `chunks` to a scanner; checks that the deltas add up to the output, that every text delta
/// is UTF-8 and, for a well-formed reply, free of markup. Returns the scanner.
v32::CompletionScanner scan_chunks(const std::vector<std::string_view>& chunks, bool thinking, bool well_formed) {
  v32::CompletionScanner scanner(thinking);
  ChatOutput sum;
  const auto add = [&](const ChatOutputDelta& d) {
    CHECK(dsv32::utf8::is_valid(d.reasoning));
    CHECK(dsv32::utf8::is_valid(d.content));
    if (well_formed) {
      CHECK_FALSE(has_dsml_markup(d.reasoning));
      CHECK_FALSE(has_dsml_markup(d.content));
    }
    sum.reasoning += d.reasoning;
    sum.content += d.content;
    sum.tool_calls.insert(sum.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  };
  for (const std::string_view chunk : chunks) {
    ChatOutputDelta d;
    scanner.push(chunk, d);
    add(d);
  }
  ChatOutputDelta d;
  scanner.finish(d);
  add(d);
  CHECK(scanner.output() == sum);
  return scanner;
}

}  // namespace

TEST_CASE("deepseek-v3.2: every case of encode_cases.json renders its text and ids, or is refused") {
  const auto& all = v3_2_cases("encode_cases.json").at("cases");
  REQUIRE(all.size() == 41);
  std::size_t rendered = 0;
  std::size_t refused = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& c = all[i];
    INFO("encode case " << i);
    const std::vector<ChatMessage> messages = v32::messages_from_json(c.at("messages"));
    const v32::EncodeOptions options{.thinking = c.at("thinking_mode") == "thinking",
                                     .drop_thinking = c.at("drop_thinking").get<bool>()};
    // The same through the request form that dsv32-tokenize reads.
    const auto request = v32::request_from_json(ordered_json{
        {"messages", c.at("messages")}, {"thinking_mode", c.at("thinking_mode")}, {"drop_thinking", c.at("drop_thinking")}});
    CHECK(request.messages == messages);
    CHECK(request.options.thinking == options.thinking);
    CHECK(request.options.drop_thinking == options.drop_thinking);
    if (c.at("error").is_null()) {
      const std::string text = c.at("text");
      const Ids ids = c.at("ids");
      CHECK(v32::encode_messages(messages, options) == text);
      CHECK(v32_tokenizer().encode(text) == ids);
      CHECK(v32_tokenizer().decode(ids) == text);
      ++rendered;
    } else {
      const std::string error = error_of([&] { (void)v32::encode_messages(messages, options); });
      INFO("module: " << c.at("error").get<std::string>());
      CHECK(error.starts_with("dsv32 [invalid_argument]: DeepSeek-V3.2 encoding: message "));
      CHECK(error.find(expected_refusal(c.at("error"))) != std::string::npos);
      ++refused;
    }
  }
  CHECK(rendered == 36);
  CHECK(refused == 5);
}

TEST_CASE("deepseek-v3.2: every case of parse_cases.json parses to its message, or is refused, as the module does") {
  const auto& all = v3_2_cases("parse_cases.json").at("cases");
  REQUIRE(all.size() == 30);
  std::size_t parsed = 0;
  std::size_t refused = 0;
  std::size_t calls = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& c = all[i];
    const std::string text = c.at("text");
    const bool thinking = c.at("thinking_mode") == "thinking";
    INFO("parse case " << i << ": " << text);
    if (!c.at("message").is_null()) {
      const ChatOutput out = v32::parse_completion(text, thinking);
      CHECK(v32::message_json(out) == c.at("message"));
      CHECK(v32::parse_completion(v32_tokenizer(), v32_tokenizer().encode(text), thinking) == out);
      CHECK(out.content == c.at("message").at("content").get<std::string>());
      CHECK(out.reasoning == c.at("message").at("reasoning_content").get<std::string>());
      calls += out.tool_calls.size();
      ++parsed;
    } else {
      // The module's rule, named in our message: "DS32EncodingError: Invalid summary format" -> "invalid summary format".
      const std::string module = c.at("error");
      const std::string rule = lowercase(module.substr(module.find(": ") + 2));
      const std::string error = error_of([&] { (void)v32::parse_completion(text, thinking); });
      CHECK(error.starts_with("dsv32 [invalid_argument]: DeepSeek-V3.2 completion: " + rule + " at byte "));
      CHECK(error_of([&] { (void)v32::parse_completion(v32_tokenizer(), v32_tokenizer().encode(text), thinking); }) == error);
      ++refused;
    }
  }
  CHECK(parsed == 16);
  CHECK(refused == 14);
  CHECK(calls == 15);
}

TEST_CASE("deepseek-v3.2: the streaming parser gives the strict parser's message at every byte split, byte by byte "
          "and token by token") {
  const auto& all = v3_2_cases("parse_cases.json").at("cases");
  std::size_t well_formed = 0;
  std::size_t splits = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& c = all[i];
    const std::string text = c.at("text");
    const bool thinking = c.at("thinking_mode") == "thinking";
    const bool ok = !c.at("message").is_null();
    INFO("parse case " << i << ": " << text);
    const std::string_view all_text = text;
    // The reference: the whole text in one push.
    const v32::CompletionScanner whole = scan_chunks({all_text}, thinking, ok);
    if (ok) {
      CHECK(whole.output() == v32::parse_completion(text, thinking));
      CHECK(whole.complete());
      CHECK(whole.state() == ChatOutputState::ended);
      CHECK(whole.malformed_reason().empty());
      ++well_formed;
    } else {
      // Refused by the module: malformed here, or (a reply cut off before its eos) not complete.
      CHECK_FALSE(whole.complete());
      const bool cut_off = c.at("error").get<std::string>().find("format") != std::string::npos &&
                           (c.at("error").get<std::string>().find("summary") != std::string::npos ||
                            c.at("error").get<std::string>().find("thinking") != std::string::npos) &&
                           whole.malformed_reason().empty();
      CHECK((whole.state() == ChatOutputState::malformed || cut_off));
    }
    for (std::size_t cut = 0; cut <= text.size(); ++cut) {
      INFO("split at byte " << cut);
      const auto two = scan_chunks({all_text.substr(0, cut), all_text.substr(cut)}, thinking, ok);
      CHECK(two.output() == whole.output());
      CHECK(two.state() == whole.state());
      CHECK(two.complete() == whole.complete());
      ++splits;
    }
    std::vector<std::string_view> bytes;
    for (std::size_t b = 0; b < text.size(); ++b) bytes.push_back(all_text.substr(b, 1));
    const auto byte_by_byte = scan_chunks(bytes, thinking, ok);
    CHECK(byte_by_byte.output() == whole.output());
    CHECK(byte_by_byte.state() == whole.state());

    // Token by token through ChatOutputParser, which decodes the ids (the eos is one of them).
    const Ids ids = v32_tokenizer().encode(text);
    ChatOutputParser parser(v32_tokenizer(), ChatFormat::deepseek_v3_2,
                            thinking ? ChatOutputState::reasoning : ChatOutputState::content);
    ChatOutput sum;
    std::size_t delivered = 0;
    for (const std::int32_t id : ids) {
      const ChatOutputDelta d = parser.push(id);
      if (ok) {
        CHECK_FALSE(has_dsml_markup(d.content));
        CHECK_FALSE(has_dsml_markup(d.reasoning));
      }
      sum.reasoning += d.reasoning;
      sum.content += d.content;
      sum.tool_calls.insert(sum.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
      delivered += d.tool_calls.size();
    }
    const ChatOutputDelta last = parser.finish();
    sum.reasoning += last.reasoning;
    sum.content += last.content;
    sum.tool_calls.insert(sum.tool_calls.end(), last.tool_calls.begin(), last.tool_calls.end());
    CHECK(parser.output() == whole.output());
    CHECK(sum == whole.output());
    CHECK(parser.state() == whole.state());
    // The reason quotes what the parser had seen, but names the same byte.
    const auto offset = [](const std::string& reason) { return reason.substr(reason.rfind(" at byte ") + 1); };
    CHECK(offset(parser.malformed_reason()) == offset(whole.malformed_reason()));
    if (ok) CHECK(delivered == whole.output().tool_calls.size());  // each call before the end
  }
  CHECK(well_formed == 16);
  CHECK(splits == 8715);  // every byte position of every completion
}

TEST_CASE("deepseek-v3.2: calls arrive with their </｜DSML｜invoke; malformed replies come back as content") {
  const std::string call =
      "<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"false\">1</｜DSML｜parameter>\n</｜DSML｜invoke>";
  const std::string text =
      "Hi\n\n<｜DSML｜function_calls>\n" + call + "\n" + call + "\n</｜DSML｜function_calls><｜end▁of▁sentence｜>";
  v32::CompletionScanner scanner(false);
  std::vector<std::size_t> arrivals;  // byte after which each call arrived
  for (std::size_t b = 0; b < text.size(); ++b) {
    ChatOutputDelta d;
    scanner.push(std::string_view(text).substr(b, 1), d);
    if (!d.tool_calls.empty()) arrivals.push_back(b + 1);
    if (b + 1 < text.size()) CHECK(scanner.state() != ChatOutputState::ended);
  }
  const std::size_t end_size = v32::tokens::invoke_end.size();
  const std::size_t first_end = text.find(v32::tokens::invoke_end) + end_size;
  const std::size_t second_end = text.find(v32::tokens::invoke_end, first_end) + end_size;
  CHECK(arrivals == std::vector<std::size_t>{first_end, second_end});
  CHECK(scanner.state() == ChatOutputState::ended);
  CHECK(scanner.output() == ChatOutput{"", "Hi", {{"f", "{\"a\": 1}"}, {"f", "{\"a\": 1}"}}});

  // A broken second call: the first stays delivered, the rest is content as generated (without eos).
  const std::string broken = "Hi\n\n<｜DSML｜function_calls>\n" + call +
                             "\n<｜DSML｜invoke nom=\"g\">\n</｜DSML｜invoke>\n</｜DSML｜function_calls><｜end▁of▁sentence｜>";
  const auto s = scan_chunks({broken}, false, false);
  CHECK(s.state() == ChatOutputState::malformed);
  CHECK(s.output().tool_calls == std::vector<ToolCall>{{"f", "{\"a\": 1}"}});
  CHECK(s.output().content == "Hi>\n<｜DSML｜invoke nom=\"g\">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>");
  CHECK(s.malformed_reason().find("a call's name must follow <｜DSML｜invoke") != std::string::npos);
  CHECK_THROWS_WITH_AS((void)v32::parse_completion(broken, false), doctest::Contains("tool name format error"),
                       dsv32::Error);

  // Reasoning that runs into a tool-call block (no </think>): the block text comes back as content.
  const auto r = scan_chunks({"Let me call it.\n\n<｜DSML｜function_calls>\n" + call + "<｜end▁of▁sentence｜>"}, true, false);
  CHECK(r.state() == ChatOutputState::malformed);
  CHECK(r.output().reasoning == "Let me call it.");
  CHECK(r.output().content == "\n\n<｜DSML｜function_calls>\n" + call);
  CHECK(r.malformed_reason() == "DeepSeek-V3.2 reply: a tool-call block inside the reasoning (before </think>) at byte 15");

  // A generation cut off by its token limit is not malformed, only incomplete.
  const auto cut = scan_chunks({"Still thinking </thi"}, true, false);
  CHECK(cut.state() == ChatOutputState::ended);
  CHECK_FALSE(cut.complete());
  CHECK(cut.output().reasoning == "Still thinking </thi");

  // Text after the eos, and after finish(): content, never an exception.
  v32::CompletionScanner after(false);
  ChatOutputDelta done;
  after.push("Done.<｜end▁of▁sentence｜>", done);
  CHECK(done.content == "Done.");
  CHECK(after.complete());
  ChatOutputDelta more;
  after.push("more", more);
  after.finish(more);
  after.push(" and more", more);
  CHECK(after.state() == ChatOutputState::malformed);
  CHECK_FALSE(after.complete());
  CHECK(after.output().content == "Done.more and more");
  CHECK(more.content == "more and more");
  CHECK(after.malformed_reason() == "DeepSeek-V3.2 reply: text after <｜end▁of▁sentence｜>: \"more\" at byte 32");
}

TEST_CASE("deepseek-v3.2: the cut-off tool-call blocks the module accepts, and those it refuses") {
  const std::string head = "\n\n<｜DSML｜function_calls";
  const std::string invoke = ">\n<｜DSML｜invoke name=\"f\">\n";
  const std::string param = "<｜DSML｜parameter name=\"a\" string=\"true\">x</｜DSML｜parameter>\n";
  const ChatOutput no_call{"", "A", {}};
  const ChatOutput one_call{"", "A", {{"f", "{}"}}};
  const ChatOutput with_param{"", "A", {{"f", "{\"a\": \"x\"}"}}};
  struct Cut {
    std::string text;
    bool accepted;      // by the module
    ChatOutput output;  // its message, or what the streaming parser hands back
  };
  const std::string a = "A" + head;
  const std::vector<Cut> cuts = {
      {a, true, no_call},
      {a + ">", false, {"", a + ">", {}}},
      {a + ">\n", false, {"", a + ">\n", {}}},
      {a + invoke, true, one_call},
      {a + invoke + param, true, with_param},
      {a + invoke + param.substr(0, param.size() - 1), false, {"", a + invoke + param.substr(0, param.size() - 1), {}}},
      {a + invoke + "</｜DSML｜invoke", true, one_call},
      {a + invoke + "</｜DSML｜invoke>", false, {"", "A>", one_call.tool_calls}},
      {a + invoke + "</｜DSML｜invoke>\n</｜DSML｜function_calls>", true, one_call},
      {a + invoke + "</｜DSML｜invoke>\n</｜DSML｜function_calls><｜end▁of", false, {"", "A<｜end▁of", one_call.tool_calls}},
  };
  for (const Cut& c : cuts) {
    INFO(c.text);
    const auto s = scan_chunks({c.text}, false, c.accepted);
    CHECK(s.output() == c.output);
    if (c.accepted) {
      CHECK(v32::parse_completion(c.text, false) == c.output);
      CHECK(s.complete());
      CHECK(s.state() == ChatOutputState::ended);
    } else {
      CHECK_THROWS_AS((void)v32::parse_completion(c.text, false), dsv32::Error);
      CHECK(s.state() == ChatOutputState::malformed);
    }
  }
}

TEST_CASE("deepseek-v3.2: the rules the cases do not reach") {
  using M = std::vector<ChatMessage>;
  const auto encode = [](const M& m, v32::EncodeOptions o = {}) { return v32::encode_messages(m, o); };
  const auto refusal = [&](const M& m, v32::EncodeOptions o = {}) { return error_of([&] { (void)encode(m, o); }); };
  const std::string bos = "<｜begin▁of▁sentence｜>";

  CHECK(refusal({{"user", "x"}, {"narrator", "y"}}) ==
        "dsv32 [invalid_argument]: DeepSeek-V3.2 encoding: message 1 (role \"narrator\"): unknown role (the encoding has "
        "\"system\", \"developer\", \"user\", \"assistant\" and \"tool\")");
  CHECK(refusal({{"tool", "42"}}).find("message 0 (role \"tool\"): a tool message must follow an assistant message with "
                                       "tool_calls (or another tool message), found it at the start of the conversation") !=
        std::string::npos);
  CHECK(refusal({{"developer", ""}}).find("a developer message needs content") != std::string::npos);
  ChatMessage prefixed{"assistant", "Sure"};
  prefixed.prefix = true;
  CHECK(refusal({{"user", "x"}, prefixed}).find("prefix: DeepSeek-V3.2's encoding has no prefix completion") !=
        std::string::npos);
  // A developer message before the last user turn: fine unless drop_thinking drops it in thinking mode.
  const M developer_first = {{"developer", "Be terse."}, {"user", "Hi"}};
  CHECK(encode(developer_first, {.thinking = true, .drop_thinking = false}) ==
        bos + "<｜User｜>\n\n# The user's message is: Be terse.<｜Assistant｜></think><｜User｜>Hi<｜Assistant｜><think>");
  CHECK(refusal(developer_first, {.thinking = true}).find("message 0 (role \"developer\"): a developer message before "
                                                           "the last user message") != std::string::npos);
  // Three calls answered by two results: the block stays open; a third result closes it; a fourth is refused.
  ChatMessage calls{"assistant", ""};
  calls.tool_calls = {{"f", "{}"}, {"g", "{\"n\": 1E-7, \"big\": 1e16, \"k\": 1e3}"}, {"h", "{}"}};
  const std::string block =
      "\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"g\">\n"
      "<｜DSML｜parameter name=\"n\" string=\"false\">1e-07</｜DSML｜parameter>\n<｜DSML｜parameter name=\"big\" "
      "string=\"false\">1e+16</｜DSML｜parameter>\n<｜DSML｜parameter name=\"k\" string=\"false\">1000.0</｜DSML｜parameter>"
      "\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"h\">\n\n</｜DSML｜invoke>\n</｜DSML｜function_calls>";
  const std::string opened = bos + "<｜User｜>q<｜Assistant｜></think>" + block + "<｜end▁of▁sentence｜>";
  CHECK(encode({{"user", "q"}, calls, {"tool", "1"}, {"tool", "2"}}) ==
        opened + "\n\n<function_results>\n<result>1</result>\n<result>2</result>");
  CHECK(encode({{"user", "q"}, calls, {"tool", "1"}, {"tool", "2"}, {"tool", "3"}}, {.thinking = true}) ==
        bos + "<｜User｜>q<｜Assistant｜><think></think>" + block + "<｜end▁of▁sentence｜>" +
            "\n\n<function_results>\n<result>1</result>\n<result>2</result>\n<result>3</result>\n</function_results>"
            "\n\n<think>");
  CHECK(refusal({{"user", "q"}, calls, {"tool", "1"}, {"tool", "2"}, {"tool", "3"}, {"tool", "4"}})
            .find("message 5 (role \"tool\"): result 4 of an assistant message (message 1) that made 3 tool call(s)") !=
        std::string::npos);
  // Arguments must be a JSON object.
  ChatMessage bad_arguments{"assistant", ""};
  bad_arguments.tool_calls = {{"f", "[1, 2]"}};
  CHECK(refusal({{"user", "q"}, bad_arguments}).find("tool_calls[0].function.arguments: expected a JSON object") !=
        std::string::npos);
  bad_arguments.tool_calls = {{"f", "{\"a\": "}};
  CHECK(refusal({{"user", "q"}, bad_arguments}).find("tool_calls[0].function.arguments: not valid JSON") !=
        std::string::npos);
  // Thinking mode without a user message: every assistant turn needs reasoning or calls; chat mode prints none.
  ChatMessage reasoned{"assistant", "A"};
  reasoned.reasoning_content = "R";
  CHECK(encode({{"system", "S"}, reasoned}, {.thinking = true}) == bos + "SR</think>A<｜end▁of▁sentence｜>");
  CHECK(encode({{"system", "S"}, reasoned}) == bos + "SA<｜end▁of▁sentence｜>");
  CHECK(refusal({{"system", "S"}, {"assistant", "A"}}, {.thinking = true}).find("needs reasoning_content or tool_calls") !=
        std::string::npos);
}

TEST_CASE("deepseek-v3.2: messages_from_json reads what the module reads and refuses what it would print as Python") {
  const auto read = [](const char* text) { return v32::messages_from_json(pyjson::loads(text, "test")); };
  const auto refusal = [&](const char* text) { return error_of([&] { (void)read(text); }); };
  // Null content where the module prints nothing; key order of tools and object arguments kept.
  const auto m = read(R"([{"role": "system", "content": null, "tools": [{"type": "function", "function": {"z": 1, "a": 2}}],
                          "response_format": {}},
                         {"role": "user", "content": "q", "tool_calls": null, "name": "ignored"},
                         {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"y": 1.0, "x": "s"}}}]}])");
  REQUIRE(m.size() == 3);
  CHECK(m[0].content.empty());
  CHECK(m[2].tool_calls == std::vector<ToolCall>{{"f", R"({"y":1.0,"x":"s"})"}});
  const std::string text = v32::encode_messages(m);
  CHECK(text.find("<functions>\n{\"z\": 1, \"a\": 2}\n</functions>\n<｜User｜>q") != std::string::npos);
  CHECK(text.find("## Response Format") == std::string::npos);  // {} is false in Python
  CHECK(text.ends_with("<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"y\" string=\"false\">1.0</｜DSML｜parameter>\n"
                       "<｜DSML｜parameter name=\"x\" string=\"true\">s</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
                       "</｜DSML｜function_calls><｜end▁of▁sentence｜>"));
  CHECK(refusal(R"([{"role": "user", "content": null}])") ==
        "dsv32 [invalid_argument]: DeepSeek-V3.2 messages: message 0 (role \"user\"): \"content\": expected a string, "
        "found null (the encoding module would print Python's representation of it)");
  CHECK(refusal(R"([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])").find("expected a string, found array") !=
        std::string::npos);
  CHECK(refusal(R"([{"role": "assistant", "content": "", "reasoning_content": 5}])")
            .find("\"reasoning_content\": expected a string or null, found number") != std::string::npos);
  CHECK(refusal(R"([{"content": "x"}])").find("message 0: expected a string \"role\", found none") != std::string::npos);
  CHECK(refusal(R"([{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": null, "arguments": "{}"}}]}])")
            .find("tool_calls[0].function.name: expected a string, found null") != std::string::npos);
  CHECK(refusal(R"([{"role": "assistant", "content": "", "tool_calls": {"name": "f"}}])")
            .find("tool_calls: expected an array, found object") != std::string::npos);
  CHECK(refusal(R"({"role": "user"})").find("expected a JSON array, found object") != std::string::npos);
  // Malformed tools are refused when encoding, whatever the role (the module converts them first).
  CHECK(error_of([&] { (void)v32::encode_messages(read(R"([{"role": "user", "content": "x", "tools": [{"name": "f"}]}])")); })
            .find("message 0 (role \"user\"): tools[0]: expected an object {\"type\": \"function\", \"function\": {...}}, "
                  "found an object without \"function\"") != std::string::npos);
  // The request form.
  CHECK(error_of([&] { (void)v32::request_from_json(pyjson::loads(R"({"messages": [], "thinking_mode": "on"})", "r")); }) ==
        "dsv32 [invalid_argument]: \"thinking_mode\" must be \"chat\" or \"thinking\", found \"on\"");
  CHECK(error_of([&] { (void)v32::request_from_json(pyjson::loads(R"({"messages": [], "tools": []})", "r")); })
            .find("unknown field \"tools\"") != std::string::npos);
  CHECK(error_of([&] { (void)v32::request_from_json(pyjson::loads(R"({"thinking_mode": "chat"})", "r")); })
            .find("missing field \"messages\"") != std::string::npos);
}

TEST_CASE("python_json: dumps and loads as Python's json module") {
  const auto roundtrip = [](const char* text) { return pyjson::dumps(pyjson::loads(text, "test")); };
  CHECK(roundtrip(R"({"b":1,"a":[true,false,null],"c":{}, "d": [], "e": "x"})") ==
        R"({"b": 1, "a": [true, false, null], "c": {}, "d": [], "e": "x"})");
  CHECK(roundtrip(R"({"a": 1, "b": 2, "a": 3})") == R"({"a": 3, "b": 2})");  // a repeated key: first place, last value
  // Floats in Python's repr.
  for (const auto& in_out : std::vector<std::pair<const char*, const char*>>{
           {"1e3", "1000.0"}, {"1E-7", "1e-07"}, {"1e16", "1e+16"}, {"1e15", "1000000000000000.0"},
           {"1234567890123456.7", "1234567890123456.8"}, {"0.0001", "0.0001"}, {"0.00001", "1e-05"},
           {"0.1", "0.1"}, {"-0.0", "-0.0"}, {"2.5", "2.5"}, {"1.5e300", "1.5e+300"}, {"5e-324", "5e-324"},
           {"123.456e5", "12345600.0"}, {"-1.25E-10", "-1.25e-10"}, {"100", "100"}, {"-0", "0"},
           {"18446744073709551615", "18446744073709551615"}, {"-9223372036854775808", "-9223372036854775808"}}) {
    INFO(in_out.first);
    CHECK(roundtrip(in_out.first) == in_out.second);
  }
  // Strings: only quotes, backslashes and control characters escaped; the rest kept.
  CHECK(pyjson::quote("a\"b\\c\n\t\r\b\f\x01\x1f\x7f é ✓ 😀") == "\"a\\\"b\\\\c\\n\\t\\r\\b\\f\\u0001\\u001f\x7f é ✓ 😀\"");
  CHECK(roundtrip(R"("\u00dc\u2713")") == "\"Ü✓\"");
  // What the two readers would read differently is refused.
  CHECK(error_of([] { (void)pyjson::loads("18446744073709551616", "x"); }) ==
        "dsv32 [invalid_argument]: x: the integer 18446744073709551616 does not fit 64 bits (Python's json keeps it "
        "exact; this implementation would round it)");
  CHECK(error_of([] { (void)pyjson::loads("\xEF\xBB\xBF{}", "x") ; }).find("byte-order mark") != std::string::npos);
  CHECK(error_of([] { (void)pyjson::loads("NaN", "x"); }).find("x: not valid JSON") != std::string::npos);
  CHECK(error_of([] { (void)pyjson::loads(std::string(300, '[') + std::string(300, ']'), "x"); }) ==
        "dsv32 [invalid_argument]: x: JSON nested deeper than 256 levels");
  // Python's truth values.
  for (const char* falsy : {"null", "false", "0", "0.0", "\"\"", "[]", "{}"}) {
    CHECK_FALSE(pyjson::truthy(pyjson::loads(falsy, "x")));
  }
  for (const char* truthy : {"true", "-1", "0.5", "\" \"", "[0]", "{\"a\": null}"}) {
    CHECK(pyjson::truthy(pyjson::loads(truthy, "x")));
  }
}

TEST_CASE("deepseek-v3.2: the chat format is chosen explicitly or from the tokenizer files") {
  const std::string dir = deepseek::data_dir(deepseek::v3_2_exp);
  const nlohmann::json tokenizer_json = dsv32::bpe::read_json_file(dir + "/tokenizer.json");
  nlohmann::json config = dsv32::bpe::read_json_file(dir + "/tokenizer_config.json");
  CHECK(v32_tokenizer().chat_format() == ChatFormat::deepseek_v3_2_exp);
  CHECK(deepseek::tokenizer(deepseek::v3).chat_format() == ChatFormat::deepseek_v3);
  // Explicitly, whatever the files say.
  CHECK(dsv32::Tokenizer::from_json(tokenizer_json, config, {.chat_format = ChatFormat::deepseek_v3_2}).chat_format() ==
        ChatFormat::deepseek_v3_2);
  // An unknown template: no format (apply_chat_template refuses it, see test_chat_template.cpp).
  nlohmann::json unknown = config;
  unknown["chat_template"] = "{{ messages }}";
  CHECK_FALSE(dsv32::Tokenizer::from_json(tokenizer_json, unknown).chat_format().has_value());
  // No template at all: DeepSeek-V3.2 ships its encoding as Python code.
  config.erase("chat_template");
  const auto v3_2_files = dsv32::Tokenizer::from_json(tokenizer_json, config);
  CHECK(v3_2_files.chat_format() == ChatFormat::deepseek_v3_2);
  CHECK_THROWS_WITH_AS((void)v3_2_files.apply_chat_template(std::vector<ChatMessage>{{"user", "Hi"}}, true),
                       doctest::Contains("its chat format is DeepSeek-V3.2's encoding"), dsv32::Error);
  // A parser of this tokenizer's ids reads DSML.
  ChatOutputParser parser(v3_2_files, ChatOutputState::reasoning);
  CHECK(parser.format() == ChatFormat::deepseek_v3_2);
  for (const std::int32_t id : v3_2_files.encode("R</think>A\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n"
                                                 "</｜DSML｜invoke>\n</｜DSML｜function_calls><｜end▁of▁sentence｜>")) {
    (void)parser.push(id);
  }
  CHECK(parser.output() == ChatOutput{"R", "A", {{"f", "{}"}}});
  CHECK(parser.state() == ChatOutputState::ended);
  // A directory with an encoding/ folder (DeepSeek-V3.2's layout), even beside a template.
  dsv32::test::TempDir tmp("v3_2_tokenizer");
  std::filesystem::copy_file(dir + "/tokenizer.json", tmp / "tokenizer.json");
  std::filesystem::copy_file(dir + "/tokenizer_config.json", tmp / "tokenizer_config.json");
  CHECK(dsv32::Tokenizer::from_directory(tmp.path).chat_format() == ChatFormat::deepseek_v3_2_exp);
  std::filesystem::create_directory(tmp / "encoding");
  CHECK(dsv32::Tokenizer::from_directory(tmp.path).chat_format() == ChatFormat::deepseek_v3_2);
  CHECK(dsv32::Tokenizer::from_directory(tmp.path, {.chat_format = ChatFormat::deepseek_v3}).chat_format() ==
        ChatFormat::deepseek_v3);
  // The names of dsv32-tokenize --chat-format.
  for (const ChatFormat f : {ChatFormat::deepseek_v3, ChatFormat::deepseek_v3_2_exp, ChatFormat::deepseek_v3_2}) {
    CHECK(dsv32::chat_format_from_name(dsv32::chat_format_name(f)) == f);
  }
  CHECK(dsv32::chat_format_name(ChatFormat::deepseek_v3_2) == "deepseek-v3.2");
  CHECK_FALSE(dsv32::chat_format_from_name("deepseek-v3.2-speciale").has_value());
}
