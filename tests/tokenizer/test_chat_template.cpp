// DeepSeek's chat templates: every case of both chat_cases.json files (rendered by the reference
// Jinja template), the rules that the cases do not reach, the JSON message format, and the
// conversations this implementation refuses.
#include <doctest/doctest.h>

#include <string>
#include <tuple>
#include <vector>

#include "deepseek.hpp"
#include "dsv32/tokenizer/chat_template.hpp"

using Ids = std::vector<std::int32_t>;
using deepseek::cases;
using deepseek::tokenizer;
using dsv32::ChatMessage;
using dsv32::ChatTemplate;
using dsv32::ChatTemplateKind;
using dsv32::ToolCall;
using nlohmann::json;

namespace {

/// Checks every case of `folder`/chat_cases.json: the rendered text and its ids, exactly. Returns
/// the number of cases checked.
std::size_t check_chat_cases(const std::string& folder) {
  const auto& tok = tokenizer(folder);
  std::size_t checked = 0;
  for (const auto& c : cases("chat_cases.json", folder).at("cases")) {
    const std::vector<ChatMessage> messages = dsv32::chat_messages_from_json(c.at("messages"));
    const dsv32::ChatTemplateOptions options{.add_generation_prompt = c.at("add_generation_prompt").get<bool>(),
                                             .thinking = c.value("thinking", false)};
    const std::string text = c.at("text");
    const Ids ids = c.at("ids");
    INFO(folder << " case " << checked << ": " << text);
    CHECK(tok.apply_chat_template(messages, options) == text);
    // The ids are encode(text) without add_special_tokens: the template already writes bos.
    CHECK(tok.encode(text) == ids);
    CHECK(tok.encode_chat(messages, options) == ids);
    CHECK(tok.decode(ids) == text);
    ++checked;
  }
  return checked;
}

using deepseek::error_of;

std::string parse_error(const json& messages) {
  return error_of([&] { (void)dsv32::chat_messages_from_json(messages); });
}

}  // namespace

TEST_CASE("chat: every case of DeepSeek-V3's chat_cases.json renders that text and encodes to those ids") {
  REQUIRE(tokenizer(deepseek::v3).chat_template_kind() == ChatTemplateKind::deepseek_v3);
  CHECK(check_chat_cases(deepseek::v3) == 20);
}

TEST_CASE("chat: every case of DeepSeek-V3.2-Exp's chat_cases.json renders that text and encodes to those ids") {
  REQUIRE(tokenizer(deepseek::v3_2_exp).chat_template_kind() == ChatTemplateKind::deepseek_v3_2_exp);
  CHECK(check_chat_cases(deepseek::v3_2_exp) == 30);
}

TEST_CASE("chat: the template texts are recognized by content") {
  for (const auto& [folder, kind, fingerprint, bytes] :
       {std::tuple{deepseek::v3, ChatTemplateKind::deepseek_v3, ChatTemplate::deepseek_v3_fingerprint, 2301},
        std::tuple{deepseek::v3_2_exp, ChatTemplateKind::deepseek_v3_2_exp, ChatTemplate::deepseek_v3_2_exp_fingerprint,
                   3245}}) {
    const std::string source = *tokenizer(folder).chat_template_source();
    CHECK(source.size() == static_cast<std::size_t>(bytes));
    CHECK(ChatTemplate::fingerprint(source) == fingerprint);
    CHECK(ChatTemplate::recognize(source) == kind);
    CHECK_FALSE(ChatTemplate::recognize(source + " ").has_value());
    CHECK(tokenizer(folder).chat_template().kind() == kind);
    CHECK(tokenizer(folder).chat_template().bos_token() == "<｜begin▁of▁sentence｜>");
  }
  CHECK(ChatTemplate::is_deepseek_v3(*tokenizer(deepseek::v3).chat_template_source()));
  CHECK_FALSE(ChatTemplate::is_deepseek_v3(*tokenizer(deepseek::v3_2_exp).chat_template_source()));
}

TEST_CASE("chat: DeepSeek-V3 rendering rules") {
  const ChatTemplate tmpl(ChatTemplateKind::deepseek_v3, "<B>");
  const std::vector<ChatMessage> chat = {
      {"user", "u1"}, {"system", "s1"}, {"assistant", "a1"}, {"system", "s2"}, {"user", "u2"}};
  // System prompts are gathered, wherever they are, after bos.
  CHECK(tmpl.render(chat, false) == "<B>s1\n\ns2<｜User｜>u1<｜Assistant｜>a1<｜end▁of▁sentence｜><｜User｜>u2");
  CHECK(tmpl.render(chat, true) ==
        "<B>s1\n\ns2<｜User｜>u1<｜Assistant｜>a1<｜end▁of▁sentence｜><｜User｜>u2<｜Assistant｜>");
  CHECK(tmpl.render({}, true) == "<B><｜Assistant｜>");
  CHECK(tmpl.render({}, false) == "<B>");
  CHECK(ChatTemplate(ChatTemplateKind::deepseek_v3).render(std::vector<ChatMessage>{{"user", "x"}}, false) ==
        "<｜User｜>x");
  CHECK_FALSE(tmpl.has_thinking_mode());
}

// Rules of the V3.2-Exp template that chat_cases.json does not show, read off the template text
// (tokenizer_config.json): the flags is_only_sys, is_last_user, is_tool and is_prefix.
TEST_CASE("chat: DeepSeek-V3.2-Exp rendering rules beyond the cases") {
  const ChatTemplate tmpl(ChatTemplateKind::deepseek_v3_2_exp, "<B>");
  CHECK(tmpl.has_thinking_mode());
  const ToolCall call{"f", "{}"};
  const std::string calls = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
                            "<｜end▁of▁sentence｜>";
  // No messages: the generation prompt only (not is_prefix).
  CHECK(tmpl.render({}, {.add_generation_prompt = true}) == "<B><｜Assistant｜></think>");
  CHECK(tmpl.render({}, {.add_generation_prompt = true, .thinking = true}) == "<B><｜Assistant｜><think>");
  // An assistant message after system messages only gets no role token (is_last_user is false);
  // a tool-call message there does (is_only_sys).
  CHECK(tmpl.render(std::vector<ChatMessage>{{"system", "S"}, {"assistant", "A"}}, false) ==
        "<B>S" "A<｜end▁of▁sentence｜>");
  CHECK(tmpl.render(std::vector<ChatMessage>{{"system", "S"}, {"assistant", "", {call}}}, false) ==
        "<B>S<｜Assistant｜></think>" + calls);
  // A system message anywhere sets is_only_sys before the loop.
  CHECK(tmpl.render(std::vector<ChatMessage>{{"assistant", "", {call}}, {"system", "S"}}, false) ==
        "<B>S<｜Assistant｜></think>" + calls);
  CHECK(tmpl.render(std::vector<ChatMessage>{{"assistant", "", {call}}}, false) == "<B>" + calls);
  // Reasoning is stripped up to the first </think>, but not after tool outputs.
  CHECK(tmpl.render(std::vector<ChatMessage>{{"user", "U"}, {"assistant", "r1</think>a</think>b"}}, false) ==
        "<B><｜User｜>U<｜Assistant｜></think>a</think>b<｜end▁of▁sentence｜>");
  CHECK(tmpl.render(std::vector<ChatMessage>{{"user", "U"}, {"assistant", "", {call}}, {"tool", "T"},
                                             {"assistant", "r</think>a"}},
                    false) == "<B><｜User｜>U<｜Assistant｜></think>" + calls +
                                  "<｜tool▁output▁begin｜>T<｜tool▁output▁end｜>r</think>a<｜end▁of▁sentence｜>");
  // After a prefix message, no generation prompt unless the last message is a user's...
  const std::vector<ChatMessage> prefixed = {{"user", "U"}, {"assistant", "P", {}, true}};
  CHECK(tmpl.render(prefixed, {.add_generation_prompt = true, .thinking = true}) ==
        "<B><｜User｜>U<｜Assistant｜><think>P<｜end▁of▁sentence｜>");
  std::vector<ChatMessage> then_user = prefixed;
  then_user.push_back({"user", "V"});
  CHECK(tmpl.render(then_user, {.add_generation_prompt = true}) ==
        "<B><｜User｜>U<｜Assistant｜></think>P<｜end▁of▁sentence｜><｜User｜>V<｜Assistant｜></think>");
  // ... and the prefix flag opens with <think> only right after a user message.
  CHECK(tmpl.render(std::vector<ChatMessage>{{"system", "S"}, {"assistant", "P", {}, true}},
                    {.add_generation_prompt = true, .thinking = true}) == "<B>SP<｜end▁of▁sentence｜>");
  // No generation prompt after a tool output.
  CHECK(tmpl.render(std::vector<ChatMessage>{{"user", "U"}, {"assistant", "", {call}}, {"tool", "T"}},
                    {.add_generation_prompt = true, .thinking = true}) ==
        "<B><｜User｜>U<｜Assistant｜></think>" + calls + "<｜tool▁output▁begin｜>T<｜tool▁output▁end｜>");
  // The default template is DeepSeek-V3.2-Exp's, with no bos.
  CHECK(ChatTemplate().render(std::vector<ChatMessage>{{"user", "x"}}, true) == "<｜User｜>x<｜Assistant｜></think>");
}

TEST_CASE("chat: conversations the templates would render into nonsense are refused") {
  const ChatTemplate v32(ChatTemplateKind::deepseek_v3_2_exp, "<B>");
  const ChatTemplate v3(ChatTemplateKind::deepseek_v3, "<B>");
  auto render_error = [](const ChatTemplate& t, const std::vector<ChatMessage>& m, dsv32::ChatTemplateOptions o = {}) {
    return error_of([&] { (void)t.render(m, o); });
  };
  const ToolCall call{"f", "{}"};
  CHECK(render_error(v32, {{"developer", "x"}}) ==
        "dsv32 [invalid_argument]: chat message 0: unknown role \"developer\" (expected \"system\", \"user\", "
        "\"assistant\" or \"tool\")");
  CHECK(render_error(v32, {{"tool", "42"}}) ==
        "dsv32 [invalid_argument]: chat message 0: a tool message must follow an assistant message with tool_calls "
        "(or another tool message), found it at the start of the conversation");
  CHECK(render_error(v32, {{"user", "x"}, {"assistant", "y"}, {"tool", "42"}}) ==
        "dsv32 [invalid_argument]: chat message 2: a tool message must follow an assistant message with tool_calls "
        "(or another tool message), found it after a \"assistant\" message without tool_calls");
  CHECK(render_error(v32, {{"user", "x"}, {"assistant", "", {call}}, {"user", "y"}, {"tool", "42"}})
            .find("chat message 3: a tool message must follow") != std::string::npos);
  CHECK(render_error(v32, {{"user", "x", {call}}}) ==
        "dsv32 [invalid_argument]: chat message 0: tool_calls on a \"user\" message (only assistant messages make "
        "tool calls)");
  CHECK(render_error(v32, {{"user", "x", {}, true}}).find("chat message 0: prefix on a \"user\" message") !=
        std::string::npos);
  CHECK(render_error(v32, {{"user", "x"}, {"assistant", "", {call}}, {"tool", "1"}, {"tool", "2"}}) == "no error");

  // What DeepSeek-V3's template cannot render.
  CHECK(render_error(v3, {{"user", "x"}}, {.thinking = true}) ==
        "dsv32 [unsupported]: thinking mode: DeepSeek-V3's chat template has none (DeepSeek-V3.2-Exp's has)");
  CHECK(render_error(v3, {{"user", "x"}, {"assistant", "", {call}}}) ==
        "dsv32 [unsupported]: chat message 1: tool calls are not supported with DeepSeek-V3's chat template");
  CHECK(render_error(v3, {{"user", "x"}, {"tool", "42"}}) ==
        "dsv32 [unsupported]: chat message 1: role \"tool\" (tool outputs) is not supported with DeepSeek-V3's chat "
        "template");
  CHECK(render_error(v3, {{"user", "x"}, {"assistant", "y", {}, true}}).find("prefix is not supported") !=
        std::string::npos);
  CHECK(render_error(v3, {{"developer", "x"}}).find("unknown role \"developer\"") != std::string::npos);
}

TEST_CASE("chat: the JSON message format") {
  const auto messages = dsv32::chat_messages_from_json(json::parse(R"([
    {"role": "system", "content": "S", "name": "ignored"},
    {"role": "user", "content": "U"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}},
      {"function": {"name": "g", "arguments": ""}}]},
    {"role": "tool", "content": "T", "tool_call_id": "call_1"},
    {"role": "assistant", "content": "A", "tool_calls": null, "prefix": true},
    {"role": "assistant", "content": "B", "tool_calls": [], "prefix": false}])"));
  const std::vector<ChatMessage> expected = {{"system", "S"},
                                             {"user", "U"},
                                             {"assistant", "", {{"f", "{\"a\": 1}"}, {"g", ""}}},
                                             {"tool", "T"},
                                             {"assistant", "A", {}, true},
                                             {"assistant", "B"}};
  CHECK(messages == expected);
  // to_json writes what chat_messages_from_json reads.
  CHECK(dsv32::chat_messages_from_json(json(messages)) == messages);
  CHECK(json(ToolCall{"f", "{}"}).dump() == R"({"function":{"arguments":"{}","name":"f"},"type":"function"})");
}

TEST_CASE("chat: malformed JSON messages are refused with what was expected and found") {
  CHECK(parse_error(json::parse(R"({"role": "user"})")).find("expected a JSON array, found object") != std::string::npos);
  CHECK(parse_error(json::parse(R"([3])")) ==
        "dsv32 [invalid_argument]: chat message 0: expected a JSON object, found number");
  CHECK(parse_error(json::parse(R"([{"content": "x"}])")) ==
        "dsv32 [invalid_argument]: chat message 0: expected a string \"role\", found none");
  CHECK(parse_error(json::parse(R"([{"role": "user"}])")) ==
        "dsv32 [invalid_argument]: chat message 0 (role \"user\"): missing \"content\" (a string; null for an "
        "assistant message that only makes tool calls)");
  CHECK(parse_error(json::parse(R"([{"role": "user", "content": [{"type": "text"}]}])")) ==
        "dsv32 [invalid_argument]: chat message 0: expected a string \"content\", found array");
  CHECK(parse_error(json::parse(R"([{"role": "assistant", "content": null}])")) ==
        "dsv32 [invalid_argument]: chat message 0 (role \"assistant\"): \"content\" is null; only an assistant "
        "message with tool_calls may have null content");
  CHECK(parse_error(json::parse(R"([{"role": "assistant", "content": null, "tool_calls": []}])"))
            .find("only an assistant message with tool_calls may have null content") != std::string::npos);
  CHECK(parse_error(json::parse(R"([{"role": "tool", "content": null}])"))
            .find("chat message 0 (role \"tool\"): \"content\" is null") != std::string::npos);
  const std::string args_error = parse_error(json::parse(
      R"([{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}])"));
  CHECK(args_error ==
        "dsv32 [invalid_argument]: chat message 0: tool_calls[0].function.arguments: expected a string (the "
        "arguments as JSON text, as OpenAI's API sends them), found {\"a\":1}");
  CHECK(parse_error(json::parse(R"([{"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": "{}"}}]}])")) ==
        "dsv32 [invalid_argument]: chat message 0: tool_calls[0].function.name: expected a string, found none");
  CHECK(parse_error(json::parse(R"([{"role": "assistant", "content": "", "tool_calls": [{"type": "retrieval", "function": {}}]}])")) ==
        "dsv32 [invalid_argument]: chat message 0: tool_calls[0].type: expected \"function\", found \"retrieval\"");
  CHECK(parse_error(json::parse(R"([{"role": "assistant", "content": "", "tool_calls": [{"type": "function"}]}])")) ==
        "dsv32 [invalid_argument]: chat message 0: tool_calls[0].function: expected an object {\"name\", "
        "\"arguments\"}, found none");
  CHECK(parse_error(json::parse(R"([{"role": "assistant", "content": "", "tool_calls": ["f"]}])"))
            .find("tool_calls[0]: expected an object") != std::string::npos);
  CHECK(parse_error(json::parse(R"([{"role": "assistant", "content": "", "tool_calls": {"name": "f"}}])")) ==
        "dsv32 [invalid_argument]: chat message 0: tool_calls: expected an array, found object");
  CHECK(parse_error(json::parse(R"([{"role": "assistant", "content": "x", "prefix": "yes"}])")) ==
        "dsv32 [invalid_argument]: chat message 0: \"prefix\" must be true or false, found \"yes\"");
}

TEST_CASE("chat: an unknown template in tokenizer_config.json is refused unless the caller opts out") {
  const nlohmann::json tokenizer_json = dsv32::bpe::read_json_file(deepseek::data_dir(deepseek::v3_2_exp) + "/tokenizer.json");
  nlohmann::json config = dsv32::bpe::read_json_file(deepseek::data_dir(deepseek::v3_2_exp) + "/tokenizer_config.json");
  const std::string original = config.at("chat_template");
  const std::vector<ChatMessage> chat = {{"user", "Hi"}};

  config["chat_template"] = original + " ";
  const auto strict = dsv32::Tokenizer::from_json(tokenizer_json, config);
  CHECK_FALSE(strict.chat_template_kind().has_value());
  CHECK_THROWS_WITH_AS((void)strict.apply_chat_template(chat, true),
                       "dsv32 [unsupported]: tokenizer_config.json chat_template (3246 bytes, fingerprint "
                       "0xb89ef72a43a7d949) is neither of the templates this library implements (DeepSeek-V3.2-Exp's, "
                       "fingerprint 0x21d0c351e642e333; DeepSeek-V3's, fingerprint 0xebe3604156dc466a); set "
                       "TokenizerOptions::require_known_chat_template = false to render with the rules of "
                       "TokenizerOptions::fallback_chat_template",
                       dsv32::Error);
  CHECK_THROWS_AS((void)strict.encode_chat(chat, true), dsv32::Error);
  // The documented fallback: DeepSeek-V3.2-Exp's rules by default, or those chosen.
  const auto relaxed = dsv32::Tokenizer::from_json(tokenizer_json, config, {.require_known_chat_template = false});
  CHECK(relaxed.apply_chat_template(chat, true) == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>");
  const auto relaxed_v3 = dsv32::Tokenizer::from_json(
      tokenizer_json, config,
      {.require_known_chat_template = false, .fallback_chat_template = ChatTemplateKind::deepseek_v3});
  CHECK(relaxed_v3.apply_chat_template(chat, true) == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>");

  config.erase("chat_template");
  CHECK_THROWS_WITH_AS((void)dsv32::Tokenizer::from_json(tokenizer_json, config).apply_chat_template(chat, true),
                       doctest::Contains("has no chat_template"), dsv32::Error);
  CHECK(dsv32::Tokenizer::from_json(tokenizer_json, config, {.require_known_chat_template = false})
            .apply_chat_template(chat, true) == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>");

  // A recognized template uses its own rules whatever the fallback.
  config["chat_template"] = *tokenizer(deepseek::v3).chat_template_source();
  CHECK(dsv32::Tokenizer::from_json(tokenizer_json, config, {.fallback_chat_template = ChatTemplateKind::deepseek_v3_2_exp})
            .apply_chat_template(chat, true) == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>");

  // The newer list form: [{"name": "default", "template": ...}].
  config["chat_template"] = json::array({json{{"name", "default"}, {"template", original}}});
  CHECK(dsv32::Tokenizer::from_json(tokenizer_json, config).apply_chat_template(chat, {.add_generation_prompt = true,
                                                                                       .thinking = true}) ==
        "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>");
}
