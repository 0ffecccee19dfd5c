// The DeepSeek-V3 chat template: chat_cases.json (rendered by the reference Jinja template) and the
// conversations this implementation refuses.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "deepseek.hpp"
#include "dsv32/tokenizer/chat_template.hpp"

using Ids = std::vector<std::int32_t>;
using deepseek::cases;
using deepseek::tokenizer;
using dsv32::ChatMessage;
using nlohmann::json;

TEST_CASE("chat: every case of chat_cases.json renders that text and encodes to those ids") {
  const auto& file = cases("chat_cases.json");
  REQUIRE(file.at("cases").size() == 20);
  for (const auto& c : file.at("cases")) {
    const std::vector<ChatMessage> messages = dsv32::chat_messages_from_json(c.at("messages"));
    const bool add_generation_prompt = c.at("add_generation_prompt");
    const std::string text = c.at("text");
    const Ids ids = c.at("ids");
    INFO("text: " << text);
    CHECK(tokenizer().apply_chat_template(messages, add_generation_prompt) == text);
    // The ids are encode(text) without add_special_tokens: the template already writes bos.
    CHECK(tokenizer().encode(text) == ids);
    CHECK(tokenizer().encode_chat(messages, add_generation_prompt) == ids);
    CHECK(tokenizer().decode(ids) == text);
  }
}

TEST_CASE("chat: rendering rules") {
  const dsv32::ChatTemplate tmpl("<B>");
  const std::vector<ChatMessage> chat = {
      {"user", "u1"}, {"system", "s1"}, {"assistant", "a1"}, {"system", "s2"}, {"user", "u2"}};
  // System prompts are gathered, wherever they are, after bos.
  CHECK(tmpl.render(chat, false) == "<B>s1\n\ns2<｜User｜>u1<｜Assistant｜>a1<｜end▁of▁sentence｜><｜User｜>u2");
  CHECK(tmpl.render(chat, true) ==
        "<B>s1\n\ns2<｜User｜>u1<｜Assistant｜>a1<｜end▁of▁sentence｜><｜User｜>u2<｜Assistant｜>");
  CHECK(tmpl.render({}, true) == "<B><｜Assistant｜>");
  CHECK(tmpl.render({}, false) == "<B>");
  CHECK(dsv32::ChatTemplate().render(std::vector<ChatMessage>{{"user", "x"}}, false) == "<｜User｜>x");
}

TEST_CASE("chat: unsupported roles and messages are refused") {
  const dsv32::ChatTemplate tmpl("<B>");
  CHECK_THROWS_WITH_AS(tmpl.render(std::vector<ChatMessage>{{"user", "x"}, {"tool", "42"}}, true),
                       doctest::Contains("chat message 1: role \"tool\" (tool outputs) is not supported"),
                       dsv32::Error);
  CHECK_THROWS_WITH_AS(tmpl.render(std::vector<ChatMessage>{{"developer", "x"}}, true),
                       "dsv32 [invalid_argument]: chat message 0: unknown role \"developer\" (expected \"system\", "
                       "\"user\" or \"assistant\")",
                       dsv32::Error);

  auto parse_error = [](const json& messages) -> std::string {
    try {
      (void)dsv32::chat_messages_from_json(messages);
    } catch (const dsv32::Error& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(parse_error(json::parse(R"([{"role": "assistant", "content": null, "tool_calls": []}])"))
            .find("chat message 0 (role \"assistant\"): null or missing content (tool-call turns) is not supported") !=
        std::string::npos);
  CHECK(parse_error(json::parse(
                        R"([{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function"}]}])"))
            .find("chat message 1: tool calls are not supported") != std::string::npos);
  CHECK(parse_error(json::parse(R"([{"role": "tool", "content": "42"}])")).find("role \"tool\"") != std::string::npos);
  CHECK(parse_error(json::parse(R"([{"content": "x"}])")).find("chat message 0: expected a string \"role\", found none") !=
        std::string::npos);
  CHECK(parse_error(json::parse(R"([{"role": "user", "content": [{"type": "text"}]}])"))
            .find("chat message 0: expected a string \"content\", found array") != std::string::npos);
  CHECK(parse_error(json::parse(R"({"role": "user"})")).find("expected a JSON array, found object") != std::string::npos);
  CHECK(parse_error(json::parse(R"([3])")).find("chat message 0: expected a JSON object, found number") !=
        std::string::npos);
  // Extra keys the template ignores are ignored.
  CHECK(dsv32::chat_messages_from_json(json::parse(R"([{"role": "user", "content": "x", "name": "bob"}])")).size() == 1);
}

TEST_CASE("chat: a different template in tokenizer_config.json is refused unless the caller opts out") {
  const nlohmann::json tokenizer_json = dsv32::bpe::read_json_file(deepseek::data_dir() + "/tokenizer.json");
  nlohmann::json config = dsv32::bpe::read_json_file(deepseek::data_dir() + "/tokenizer_config.json");
  const std::string original = config.at("chat_template");
  CHECK(dsv32::ChatTemplate::is_deepseek_v3(original));
  CHECK(dsv32::ChatTemplate::fingerprint(original) == dsv32::ChatTemplate::deepseek_v3_fingerprint);
  const std::vector<ChatMessage> chat = {{"user", "Hi"}};

  config["chat_template"] = original + " ";
  const auto strict = dsv32::Tokenizer::from_json(tokenizer_json, config);
  CHECK_THROWS_WITH_AS((void)strict.apply_chat_template(chat, true),
                       doctest::Contains("chat_template (2302 bytes, fingerprint 0x"), dsv32::Error);
  CHECK_THROWS_WITH_AS((void)strict.apply_chat_template(chat, true),
                       doctest::Contains("is not the DeepSeek-V3 template this library implements (fingerprint "
                                         "0xebe3604156dc466a)"),
                       dsv32::Error);
  const auto relaxed = dsv32::Tokenizer::from_json(tokenizer_json, config, {.require_known_chat_template = false});
  CHECK(relaxed.apply_chat_template(chat, true) == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>");

  config.erase("chat_template");
  CHECK_THROWS_WITH_AS((void)dsv32::Tokenizer::from_json(tokenizer_json, config).apply_chat_template(chat, true),
                       doctest::Contains("has no chat_template"), dsv32::Error);

  // The newer list form: [{"name": "default", "template": ...}].
  config["chat_template"] = json::array({json{{"name", "default"}, {"template", original}}});
  CHECK(dsv32::Tokenizer::from_json(tokenizer_json, config).apply_chat_template(chat, false) ==
        "<｜begin▁of▁sentence｜><｜User｜>Hi");
}
