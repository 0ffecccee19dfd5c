// The OpenAI-compatible API's protocol (serving/openai.hpp) and the server's metrics
// (serving/metrics.hpp), without HTTP or a model: requests read into messages and parameters or
// refused with the documented status, type, param and code; prompts rendered with tools in each
// chat format, against hand-written expectations; streamed chunks adding up to the response; stop
// strings across pieces; the Prometheus text.
#include <doctest/doctest.h>

#include <dsv32/serving/metrics.hpp>
#include <dsv32/serving/openai.hpp>

#include <string>
#include <vector>

namespace {

using dsv32::openai::ApiError;
using dsv32::openai::Json;
namespace oa = dsv32::openai;

constexpr std::int64_t kVocab = 129280;

// Runs f(), which must throw ApiError; returns it.
template <class F>
ApiError api_error(F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  FAIL("expected an ApiError");
  return ApiError(0, "", "");
}

Json chat(Json extra = Json::object()) {
  Json body{{"model", "m"}, {"messages", Json::array({Json{{"role", "user"}, {"content", "Hi"}}})}};
  for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = *it;
  return body;
}

oa::ChatRequest parse_chat(const Json& body) { return oa::parse_chat_request(body, kVocab); }

// The error a chat body gets: status, param and code checked; the message returned.
std::string chat_error(const Json& body, int status, const std::string& param, const std::string& code) {
  const ApiError e = api_error([&] { parse_chat(body); });
  CHECK(e.status() == status);
  CHECK(e.param() == param);
  CHECK(e.code() == code);
  return e.message();
}

}  // namespace

TEST_CASE("openai: ApiError is OpenAI's error object") {
  const ApiError e(404, "invalid_request_error", "the model 'x' does not exist", "model", "model_not_found");
  CHECK(e.body().dump() == R"({"error":{"message":"the model 'x' does not exist","type":"invalid_request_error","param":"model","code":"model_not_found"}})");
  CHECK(e.kind() == dsv32::ErrorKind::invalid_argument);
  const ApiError busy(429, "rate_limit_error", "busy");
  CHECK(busy.body()["error"]["param"].is_null());
  CHECK(busy.body()["error"]["code"].is_null());
  CHECK(busy.kind() == dsv32::ErrorKind::busy);
  CHECK(ApiError(503, "server_error", "x").kind() == dsv32::ErrorKind::state);
}

TEST_CASE("openai: a chat request's fields and defaults") {
  const oa::ChatRequest r = parse_chat(chat());
  CHECK(r.model == "m");
  REQUIRE(r.messages.size() == 1);
  CHECK(r.messages[0] == dsv32::ChatMessage{"user", "Hi"});
  CHECK(r.params.sampling.temperature == 1.0);  // OpenAI's defaults
  CHECK(r.params.sampling.top_p == 1.0);
  CHECK(r.params.sampling.top_k == 0);
  CHECK_FALSE(r.params.max_tokens);
  CHECK_FALSE(r.params.seed);
  CHECK(r.params.logprobs == -1);
  CHECK_FALSE(r.params.stream);
  CHECK_FALSE(r.thinking);
  CHECK(r.tools.is_null());

  const oa::ChatRequest s = parse_chat(chat({{"temperature", 0}, {"top_p", 0.5}, {"top_k", 40}, {"max_completion_tokens", 7},
                                             {"seed", -3}, {"stop", "END"}, {"stop_token_ids", {1, 2}}, {"logprobs", true},
                                             {"top_logprobs", 3}, {"stream", true},
                                             {"stream_options", {{"include_usage", true}}},
                                             {"chat_template_kwargs", {{"thinking", true}}}, {"n", 1},
                                             {"presence_penalty", 0}, {"frequency_penalty", 0.0}, {"user", "u"},
                                             {"logit_bias", Json::object()}, {"response_format", {{"type", "text"}}},
                                             {"parallel_tool_calls", true}, {"tool_choice", "auto"}, {"max_tokens", nullptr}}));
  CHECK(s.params.sampling.temperature == 0.0);
  CHECK(s.params.sampling.top_p == 0.5);
  CHECK(s.params.sampling.top_k == 40);
  CHECK(s.params.max_tokens == 7);
  CHECK(s.params.seed == static_cast<std::uint64_t>(-3));
  CHECK(s.params.stop == std::vector<std::string>{"END"});
  CHECK(s.params.stop_token_ids == std::vector<std::int32_t>{1, 2});
  CHECK(s.params.logprobs == 3);
  CHECK(s.params.stream);
  CHECK(s.params.include_usage);
  CHECK(s.thinking);
  CHECK(parse_chat(chat({{"top_k", -1}})).params.sampling.top_k == 0);  // vLLM's "off"
  CHECK(parse_chat(chat({{"logprobs", true}})).params.logprobs == 0);    // the chosen token's only
  CHECK(parse_chat(chat({{"stop", {"a", "b"}}})).params.stop == std::vector<std::string>{"a", "b"});
}

TEST_CASE("openai: chat messages as the formats take them") {
  const Json messages = Json::array(
      {Json{{"role", "system"}, {"content", Json::array({Json{{"type", "text"}, {"text", "Be"}}, Json{{"type", "text"}, {"text", "brief."}}})}},
       Json{{"role", "user"}, {"content", "Weather?"}, {"name", "ann"}},
       Json{{"role", "assistant"}, {"content", nullptr}, {"reasoning_content", "Call it."}, {"refusal", nullptr},
            {"tool_calls", Json::array({Json{{"id", "c1"}, {"type", "function"},
                                             {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}})}},
       Json{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "22C"}}});
  const oa::ChatRequest r = parse_chat(chat({{"messages", messages}}));
  REQUIRE(r.messages.size() == 4);
  CHECK(r.messages[0].content == "Be\nbrief.");  // text parts joined with "\n", as vLLM joins them
  CHECK(r.messages[1].content == "Weather?");
  CHECK(r.messages[2].content.empty());
  CHECK(r.messages[2].reasoning_content == "Call it.");
  REQUIRE(r.messages[2].tool_calls.size() == 1);
  CHECK(r.messages[2].tool_calls[0] == dsv32::ToolCall{"get_weather", "{\"city\": \"Paris\"}"});
  CHECK(r.messages[3] == dsv32::ChatMessage{"tool", "22C"});
}

TEST_CASE("openai: bad chat requests get a 400 naming the field") {
  CHECK(api_error([] { parse_chat(Json::array()); }).code() == "invalid_type");
  chat_error(Json{{"messages", chat()["messages"]}}, 400, "model", "missing_required_parameter");
  chat_error(Json{{"model", "m"}}, 400, "messages", "missing_required_parameter");
  chat_error(chat({{"messages", Json::array()}}), 400, "messages", "invalid_value");
  chat_error(chat({{"messages", "Hi"}}), 400, "messages", "invalid_type");
  CHECK(chat_error(chat({{"temperature", "hot"}}), 400, "temperature", "invalid_type") ==
        "'temperature': expected a number, got a string");
  chat_error(chat({{"temperature", -0.5}}), 400, "temperature", "invalid_value");
  chat_error(chat({{"top_p", 0}}), 400, "top_p", "invalid_value");
  chat_error(chat({{"top_k", 1.5}}), 400, "top_k", "invalid_type");
  chat_error(chat({{"max_tokens", 0}}), 400, "max_tokens", "invalid_value");
  chat_error(chat({{"max_tokens", 5}, {"max_completion_tokens", 6}}), 400, "max_completion_tokens", "invalid_value");
  chat_error(chat({{"stop", {"a", 1}}}), 400, "stop[1]", "invalid_type");
  chat_error(chat({{"stop", ""}}), 400, "stop", "invalid_value");
  CHECK(chat_error(chat({{"stop_token_ids", {5, kVocab}}}), 400, "stop_token_ids[1]", "invalid_value") ==
        "'stop_token_ids[1]' must be an integer in [0, 129279], got 129280");
  chat_error(chat({{"top_logprobs", 2}}), 400, "top_logprobs", "invalid_value");
  chat_error(chat({{"logprobs", true}, {"top_logprobs", 21}}), 400, "top_logprobs", "invalid_value");
  chat_error(chat({{"stream_options", {{"include_usage", true}}}}), 400, "stream_options", "invalid_value");
  chat_error(chat({{"stream", true}, {"stream_options", {{"usage", true}}}}), 400, "stream_options.usage", "unknown_parameter");
  CHECK(chat_error(chat({{"bogus", 1}}), 400, "bogus", "unknown_parameter") ==
        "unrecognized request argument supplied: 'bogus'");
  chat_error(chat({{"chat_template_kwargs", {{"enable_thinking", true}}}}), 400, "chat_template_kwargs.enable_thinking",
             "unknown_parameter");
  // what would change the result but is not implemented: refused, never ignored
  CHECK(chat_error(chat({{"n", 2}}), 400, "n", "unsupported_parameter").starts_with("'n' is not supported by this server"));
  chat_error(chat({{"presence_penalty", 0.5}}), 400, "presence_penalty", "unsupported_parameter");
  chat_error(chat({{"repetition_penalty", 1.1}}), 400, "repetition_penalty", "unsupported_parameter");
  chat_error(chat({{"logit_bias", {{"5", 10}}}}), 400, "logit_bias", "unsupported_parameter");
  chat_error(chat({{"response_format", {{"type", "json_object"}}}}), 400, "response_format", "unsupported_parameter");
  chat_error(chat({{"tool_choice", "required"}}), 400, "tool_choice", "unsupported_parameter");
  chat_error(chat({{"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}}), 400, "tool_choice",
             "unsupported_parameter");
  chat_error(chat({{"parallel_tool_calls", false}}), 400, "parallel_tool_calls", "unsupported_parameter");
  chat_error(chat({{"reasoning_effort", "high"}}), 400, "reasoning_effort", "unsupported_parameter");
  chat_error(chat({{"functions", Json::array()}}), 400, "functions", "unsupported_parameter");
  // messages
  auto with = [](Json message) { return chat({{"messages", Json::array({std::move(message)})}}); };
  CHECK(chat_error(with({{"role", "robot"}, {"content", "x"}}), 400, "messages[0].role", "invalid_value") ==
        "'messages[0].role' is \"robot\"; expected \"system\", \"developer\", \"user\", \"assistant\" or \"tool\"");
  chat_error(with({{"content", "x"}}), 400, "messages[0].role", "missing_required_parameter");
  chat_error(with({{"role", "user"}}), 400, "messages[0].content", "missing_required_parameter");
  chat_error(with({{"role", "user"}, {"content", nullptr}}), 400, "messages[0].content", "invalid_value");
  chat_error(with({{"role", "user"}, {"content", 5}}), 400, "messages[0].content", "invalid_type");
  chat_error(with({{"role", "user"}, {"content", Json::array({Json{{"type", "image_url"}, {"image_url", "u"}}})}}), 400,
             "messages[0].content[0].type", "unsupported_parameter");
  chat_error(with({{"role", "user"}, {"content", "x"}, {"tool_calls", Json::array()}}), 400, "messages[0].tool_calls",
             "invalid_value");
  chat_error(with({{"role", "assistant"}, {"content", "x"}, {"prefix", true}}), 400, "messages[0].prefix",
             "unsupported_parameter");
  chat_error(with({{"role", "assistant"}, {"tool_calls", Json::array({Json{{"type", "function"}, {"function", {{"name", "f"}}}}})}}),
             400, "messages[0].tool_calls[0].function.arguments", "missing_required_parameter");
  chat_error(with({{"role", "assistant"}, {"tool_calls", Json::array({Json{{"function", {{"name", "f"}, {"arguments", Json::object()}}}}})}}),
             400, "messages[0].tool_calls[0].function.arguments", "invalid_type");
  // a result must answer the call in its place: the formats match results to calls by order
  const Json answers_wrong_call = Json::array(
      {Json{{"role", "user"}, {"content", "x"}},
       Json{{"role", "assistant"}, {"content", ""},
            {"tool_calls", Json::array({Json{{"id", "a"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}},
                                        Json{{"id", "b"}, {"function", {{"name", "g"}, {"arguments", "{}"}}}}})}},
       Json{{"role", "tool"}, {"tool_call_id", "b"}, {"content", "1"}}});
  CHECK(chat_error(chat({{"messages", answers_wrong_call}}), 400, "messages[2].tool_call_id", "invalid_value") ==
        "'messages[2].tool_call_id' is \"b\" but results answer the calls in order: this one answers call 0, \"a\"");
  // tools
  chat_error(chat({{"tools", Json::array({Json{{"type", "function"}, {"function", {{"description", "d"}}}}})}}), 400,
             "tools[0].function.name", "invalid_value");
  chat_error(chat({{"tools", Json::array({Json{{"type", "code_interpreter"}}})}}), 400, "tools[0].type", "invalid_value");
  chat_error(chat({{"tools", Json::array({Json{{"type", "function"}, {"function", {{"name", "f"}, {"strict", true}}}}})}}),
             400, "tools[0].function.strict", "unsupported_parameter");
}

TEST_CASE("openai: completion requests") {
  auto parse = [](Json extra) {
    Json body{{"model", "m"}, {"prompt", "Hello"}};
    for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = *it;
    return oa::parse_completion_request(body, 1000);
  };
  const oa::CompletionRequest text = parse(Json::object());
  CHECK(text.prompt_text == "Hello");
  CHECK(text.params.max_tokens == 16);  // OpenAI's default for completions
  CHECK(parse({{"max_tokens", 3}}).params.max_tokens == 3);
  CHECK(parse({{"prompt", {1, 2, 3}}}).prompt_ids == std::vector<std::int32_t>{1, 2, 3});
  CHECK(parse({{"prompt", Json::array({Json::array({4, 5})})}}).prompt_ids == std::vector<std::int32_t>{4, 5});
  CHECK(parse({{"prompt", Json::array({"Hi"})}}).prompt_text == "Hi");
  CHECK(parse({{"logprobs", 2}}).params.logprobs == 2);
  CHECK(parse({{"echo", false}, {"best_of", 1}, {"suffix", ""}}).params.logprobs == -1);
  auto error = [&](Json extra, const std::string& param, const std::string& code) {
    const ApiError e = api_error([&] { parse(extra); });
    CHECK(e.status() == 400);
    CHECK(e.param() == param);
    CHECK(e.code() == code);
    return e.message();
  };
  CHECK(error({{"prompt", {1, 1000}}}, "prompt", "invalid_value") ==
        "'prompt' token 1 is 1000, outside the model's vocabulary [0, 1000)");
  error({{"prompt", {1, -1}}}, "prompt", "invalid_value");
  error({{"prompt", Json::array({"a", "b"})}}, "prompt", "unsupported_parameter");
  error({{"prompt", ""}}, "prompt", "invalid_value");
  error({{"prompt", Json::array()}}, "prompt", "invalid_value");
  error({{"prompt", 5}}, "prompt", "invalid_type");
  error({{"echo", true}}, "echo", "unsupported_parameter");
  error({{"best_of", 2}}, "best_of", "unsupported_parameter");
  error({{"suffix", "x"}}, "suffix", "unsupported_parameter");
  error({{"logprobs", true}}, "logprobs", "invalid_type");
  error({{"messages", Json::array()}}, "messages", "unknown_parameter");
  const ApiError missing = api_error([] { oa::parse_completion_request(Json{{"model", "m"}}, 10); });
  CHECK(missing.param() == "prompt");
}

TEST_CASE("openai: chat prompts in DeepSeek-V3.2-Exp's format, with tools in the system prompt") {
  const std::string bos = "<｜begin▁of▁sentence｜>";
  oa::ChatRequest r = parse_chat(chat({{"messages", Json::array({Json{{"role", "system"}, {"content", "Be brief."}},
                                                                  Json{{"role", "user"}, {"content", "Hi"}}})}}));
  CHECK(oa::render_chat_prompt(r, dsv32::ChatFormat::deepseek_v3_2_exp, bos) ==
        bos + "Be brief.<｜User｜>Hi<｜Assistant｜></think>");
  r.thinking = true;
  CHECK(oa::render_chat_prompt(r, dsv32::ChatFormat::deepseek_v3_2_exp, bos) ==
        bos + "Be brief.<｜User｜>Hi<｜Assistant｜><think>");
  r.thinking = false;
  r.tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  const std::string block =
      "## Tools\nYou have access to the following tools:\n\n### get_weather\nDescription: Weather of a city\n\n"
      "Parameters: {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}\n\n"
      "IMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments<｜tool▁call▁end｜>"
      "{{additional_tool_calls}}<｜tool▁calls▁end｜>\n\nWhere:\n\n"
      "- `tool_call_name` must be an exact match to one of the available tools\n"
      "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
      "- For multiple tool calls, chain them directly without separators or spaces\n";
  CHECK(oa::v3_2_exp_tools_block(r.tools) == block);
  CHECK(oa::render_chat_prompt(r, dsv32::ChatFormat::deepseek_v3_2_exp, bos) ==
        bos + "Be brief.\n\n" + block + "<｜User｜>Hi<｜Assistant｜></think>");
  r.tool_choice_none = true;  // no tools in the prompt
  CHECK(oa::render_chat_prompt(r, dsv32::ChatFormat::deepseek_v3_2_exp, bos) ==
        bos + "Be brief.<｜User｜>Hi<｜Assistant｜></think>");
  r.tool_choice_none = false;
  r.messages.erase(r.messages.begin());  // no system message: the block becomes one
  CHECK(oa::render_chat_prompt(r, dsv32::ChatFormat::deepseek_v3_2_exp, bos) == bos + block + "<｜User｜>Hi<｜Assistant｜></think>");

  // a tool-call round trip renders the call and its result
  oa::ChatRequest trip = parse_chat(chat({{"messages", Json::parse(R"([
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c", "content": "22C"}])")}}));
  CHECK(oa::render_chat_prompt(trip, dsv32::ChatFormat::deepseek_v3_2_exp, bos) ==
        bos + "<｜User｜>Weather?<｜Assistant｜></think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather"
              "<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
              "<｜tool▁output▁begin｜>22C<｜tool▁output▁end｜>");

  // what the format refuses: 400 on messages, the reason kept
  auto refused = [&](const char* messages) {
    const oa::ChatRequest bad = parse_chat(chat({{"messages", Json::parse(messages)}}));
    const ApiError e = api_error([&] { oa::render_chat_prompt(bad, dsv32::ChatFormat::deepseek_v3_2_exp, bos); });
    CHECK(e.status() == 400);
    CHECK(e.param() == "messages");
    return e.message();
  };
  CHECK(refused(R"([{"role": "developer", "content": "x"}, {"role": "user", "content": "y"}])") ==
        "DeepSeek-V3.2-Exp format: chat message 0: unknown role \"developer\" (expected \"system\", \"user\", \"assistant\" or \"tool\")");
  CHECK(refused(R"([{"role": "tool", "content": "x"}])").starts_with(
      "DeepSeek-V3.2-Exp format: chat message 0: a tool message must follow an assistant message with tool_calls"));
  // DeepSeek-V3's template has no thinking mode nor tools
  oa::ChatRequest v3 = parse_chat(chat({{"chat_template_kwargs", {{"thinking", true}}}}));
  CHECK(api_error([&] { oa::render_chat_prompt(v3, dsv32::ChatFormat::deepseek_v3, bos); }).param() == "messages");
}

TEST_CASE("openai: chat prompts in DeepSeek-V3.2's encoding, tools on the system message") {
  const std::string bos = "<｜begin▁of▁sentence｜>";
  oa::ChatRequest r = parse_chat(chat({{"messages", Json::array({Json{{"role", "system"}, {"content", "S"}},
                                                                  Json{{"role", "developer"}, {"content", "D"}},
                                                                  Json{{"role", "user"}, {"content", "Hi"}}})}}));
  r.tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  std::vector<dsv32::ChatMessage> expected = r.messages;
  expected[0].tools = r.tools;
  CHECK(oa::render_chat_prompt(r, dsv32::ChatFormat::deepseek_v3_2, bos) == dsv32::deepseek_v3_2::encode_messages(expected));
  CHECK(oa::render_chat_prompt(r, dsv32::ChatFormat::deepseek_v3_2, bos).starts_with(bos + "S\n\n## Tools\n"));
  // without a system message first, tools go on a new one
  r.messages.erase(r.messages.begin());
  expected = r.messages;
  expected.insert(expected.begin(), dsv32::ChatMessage{"system", ""});
  expected[0].tools = r.tools;
  r.thinking = true;
  // a developer message before the last user message, in thinking mode: printed (the module's
  // drop_thinking would drop it and fail; reasoning there is never printed either way)
  CHECK(oa::render_chat_prompt(r, dsv32::ChatFormat::deepseek_v3_2, bos) ==
        dsv32::deepseek_v3_2::encode_messages(expected, {.thinking = true, .drop_thinking = false}));
  CHECK(oa::render_chat_prompt(r, dsv32::ChatFormat::deepseek_v3_2, bos).find("\n\n# The user's message is: D") != std::string::npos);
  CHECK(oa::render_chat_prompt(r, dsv32::ChatFormat::deepseek_v3_2, bos).ends_with("<｜User｜>Hi<｜Assistant｜><think>"));
  // a conversation that ends with the assistant cannot be continued in this format
  oa::ChatRequest ends = parse_chat(chat({{"messages", Json::parse(R"([{"role": "user", "content": "a"},
                                                                         {"role": "assistant", "content": "b"}])")}}));
  const ApiError e = api_error([&] { oa::render_chat_prompt(ends, dsv32::ChatFormat::deepseek_v3_2, bos); });
  CHECK(e.param() == "messages");
  CHECK(e.message() == "DeepSeek-V3.2's encoding continues a conversation after a user, developer or tool message; the "
                       "last message is a \"assistant\" message");
}

TEST_CASE("openai: a streamed chat completion adds up to the response") {
  oa::ChatCompletionBuilder b("chatcmpl-abc", 1700000000, "m", /*logprobs=*/true);
  std::string stream = b.role_chunk();
  CHECK(stream == "data: {\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\","
                  "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
                  "\"finish_reason\":null}]}\n\n");
  const oa::TokenLogprob lp{7, "Hi", -0.5f, {{7, "Hi", -0.5f}, {8, "\xE4\xBD", -1.5f}}};  // a partial character
  CHECK(b.add({}, {lp}).empty());  // log-probabilities wait for text
  dsv32::ChatOutputDelta d1;
  d1.reasoning = "think";
  const std::string c1 = b.add(d1, {lp});
  const Json j1 = Json::parse(c1.substr(6));
  CHECK(j1["choices"][0]["delta"] == Json{{"reasoning_content", "think"}});
  REQUIRE(j1["choices"][0]["logprobs"]["content"].size() == 2);  // the waiting one and this one
  CHECK(j1["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["token"] == "\xEF\xBF\xBD");  // U+FFFD
  CHECK(j1["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["bytes"] == Json{0xE4, 0xBD});
  dsv32::ChatOutputDelta d2;
  d2.content = "ok";
  d2.tool_calls = {{"f", "{\"a\": 1}"}};
  const Json j2 = Json::parse(b.add(d2, {}).substr(6));
  CHECK(j2["choices"][0]["delta"]["content"] == "ok");
  CHECK(j2["choices"][0]["delta"]["tool_calls"] ==
        Json::parse(R"([{"index": 0, "id": "call_abc_0", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}])"));
  CHECK(j2["choices"][0]["logprobs"].is_null());
  const Json fin = Json::parse(b.finish_chunk("tool_calls", nullptr).substr(6));
  CHECK(fin["choices"][0]["finish_reason"] == "tool_calls");
  CHECK(fin["choices"][0]["delta"] == Json::object());
  const oa::Usage usage{5, 3, 2};
  const Json u = Json::parse(b.usage_chunk(usage).substr(6));
  CHECK(u["choices"] == Json::array());
  CHECK(u["usage"] == Json::parse(R"({"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8,
                                      "prompt_tokens_details": {"cached_tokens": 2}})"));
  const Json r = b.response("tool_calls", nullptr, usage);
  CHECK(r["object"] == "chat.completion");
  CHECK(r["choices"][0]["message"]["reasoning_content"] == "think");
  CHECK(r["choices"][0]["message"]["content"] == "ok");
  CHECK(r["choices"][0]["message"]["tool_calls"][0]["id"] == "call_abc_0");
  CHECK(r["choices"][0]["logprobs"]["content"].size() == 2);
  CHECK(r["choices"][0]["finish_reason"] == "tool_calls");

  // only tool calls: content is null; no reasoning: null
  oa::ChatCompletionBuilder calls("chatcmpl-x", 0, "m", false);
  dsv32::ChatOutputDelta d;
  d.tool_calls = {{"f", "{}"}};
  calls.add(d, {});
  const Json rc = calls.response("tool_calls", nullptr, {});
  CHECK(rc["choices"][0]["message"]["content"].is_null());
  CHECK(rc["choices"][0]["message"]["reasoning_content"].is_null());
  CHECK(rc["choices"][0]["logprobs"].is_null());
  // tokens named by id (return_tokens_as_token_ids)
  oa::ChatCompletionBuilder ids("chatcmpl-y", 0, "m", true, true);
  dsv32::ChatOutputDelta t;
  t.content = "x";
  CHECK(Json::parse(ids.add(t, {lp}).substr(6))["choices"][0]["logprobs"]["content"][0]["token"] == "token_id:7");
  CHECK(oa::chat_finish_reason(true, false, true) == "tool_calls");
  CHECK(oa::chat_finish_reason(false, false, true) == "stop");
  CHECK(oa::chat_finish_reason(true, true, true) == "length");
}

TEST_CASE("openai: a streamed completion, a chunk per token") {
  oa::CompletionBuilder b("cmpl-1", 1, "m", /*logprobs=*/true, /*tokens_as_ids=*/false);
  const oa::TokenLogprob a{1, "He", -1.0f, {{1, "He", -1.0f}}}, c{2, "llo", -2.0f, {}};
  const Json j1 = Json::parse(b.add("He", {a}).substr(6));
  CHECK(j1["object"] == "text_completion");
  CHECK(j1["choices"][0]["text"] == "He");
  CHECK(j1["choices"][0]["logprobs"]["tokens"] == Json{"He"});
  CHECK(j1["choices"][0]["logprobs"]["top_logprobs"] == Json::array({Json{{"He", -1.0}}}));
  CHECK(Json::parse(b.add("", {c}).substr(6))["choices"][0]["text"] == "");  // sent, to time the token
  b.add("llo", {});
  const Json fin = Json::parse(b.finish_chunk("stop", "END").substr(6));
  CHECK(fin["choices"][0]["finish_reason"] == "stop");
  CHECK(fin["choices"][0]["stop_reason"] == "END");
  const Json r = b.response("stop", "END", {2, 2, 0});
  CHECK(r["choices"][0]["text"] == "Hello");
  CHECK(r["choices"][0]["logprobs"]["tokens"] == Json{"He", "llo"});
  CHECK(r["choices"][0]["logprobs"]["token_logprobs"] == Json{-1.0, -2.0});
  CHECK(r["choices"][0]["logprobs"]["top_logprobs"][1].is_null());
  CHECK(r["choices"][0]["logprobs"]["text_offset"] == Json{0, 2});
  CHECK(r["usage"]["total_tokens"] == 4);
  CHECK(oa::CompletionBuilder("cmpl-2", 1, "m", false).response("length", nullptr, {})["choices"][0]["logprobs"].is_null());
}

TEST_CASE("openai: stop strings across pieces") {
  oa::StopStrings none;
  CHECK(none.push("abc").text == "abc");
  CHECK(none.flush().empty());

  oa::StopStrings s({"END", "STOP"});
  CHECK(s.push("hello E").text == "hello ");  // "E" might start "END"
  CHECK(s.push("N").text.empty());
  const auto r = s.push("Dx");
  CHECK(r.text.empty());
  REQUIRE(r.match);
  CHECK(*r.match == 0);
  CHECK(s.matched());
  CHECK(s.push("more").text.empty());
  CHECK(s.flush().empty());

  oa::StopStrings t({"END", "STOP"});
  CHECK(t.push("aS").text == "a");
  const auto r2 = t.push("Tx ENDSTOP");  // "ST" was not STOP: released; END comes first
  CHECK(r2.text == "STx ");
  CHECK(r2.match == 0u);

  oa::StopStrings tail({"xyz"});
  CHECK(tail.push("abxy").text == "ab");
  CHECK(tail.flush() == "xy");  // the end: what was held back was text

  oa::StopStrings overlapping({"aab"});
  CHECK(overlapping.push("aa").text.empty());
  CHECK(overlapping.push("a").text == "a");  // "aaa": the first "a" cannot start "aab" any more
  CHECK(overlapping.push("b").match == 0u);

  oa::StopStrings utf8({"。"});
  CHECK(utf8.push("好").text == "好");
  const auto r3 = utf8.push("吗。后");
  CHECK(r3.text == "吗");
  CHECK(r3.match == 0u);
}

TEST_CASE("metrics: Prometheus text of the server's counters and the engine's figures") {
  dsv32::ServerMetrics m;
  m.count_response("/v1/chat/completions", 200);
  m.count_response("/v1/chat/completions", 200);
  m.count_response("/v1/completions", 400);
  m.record_generation(10, 4, 0.03, 0.02, 0.2);
  m.record_generation(5, 1, 2.0, 0.0, 2.5);  // one token: no TPOT
  m.count_disconnect();
  dsv32::EngineStats e;
  e.running = 2;
  e.waiting = 3;
  e.pages_used = 7;
  e.pages_cached = 1;
  e.pages_free = 8;
  e.page_size = 64;
  e.prompt_tokens = 100;
  e.prefix_hit_tokens = 64;
  e.preemptions = 1;
  e.finished_by[static_cast<int>(dsv32::FinishReason::cancelled)] = 4;
  const std::string text = m.render(e);
  auto has = [&](const std::string& line) {
    INFO(line);
    CHECK(text.find(line + "\n") != std::string::npos);
  };
  has("# TYPE dsv32_http_requests_total counter");
  has("dsv32_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2");
  has("dsv32_http_requests_total{endpoint=\"/v1/completions\",status=\"400\"} 1");
  has("dsv32_client_disconnects_total 1");
  has("dsv32_prompt_tokens_total 15");
  has("dsv32_generation_tokens_total 5");
  has("# TYPE dsv32_time_to_first_token_seconds histogram");
  has("dsv32_time_to_first_token_seconds_bucket{le=\"0.02\"} 0");
  has("dsv32_time_to_first_token_seconds_bucket{le=\"0.04\"} 1");
  has("dsv32_time_to_first_token_seconds_bucket{le=\"2.5\"} 2");
  has("dsv32_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2");
  has("dsv32_time_to_first_token_seconds_sum 2.03");
  has("dsv32_time_to_first_token_seconds_count 2");
  has("dsv32_time_per_output_token_seconds_count 1");
  has("dsv32_e2e_request_latency_seconds_count 2");
  has("dsv32_requests_running 2");
  has("dsv32_requests_waiting 3");
  has("dsv32_cache_pages{state=\"used\"} 7");
  has("dsv32_cache_pages{state=\"cached\"} 1");
  has("dsv32_cache_pages{state=\"free\"} 8");
  has("dsv32_prefix_cache_queries_total 100");
  has("dsv32_prefix_cache_hits_total 64");
  has("dsv32_preemptions_total 1");
  has("dsv32_requests_finished_total{reason=\"cancelled\"} 4");
  has("dsv32_requests_finished_total{reason=\"eos\"} 0");
  CHECK(dsv32::Histogram::number(0.1) == "0.1");
  CHECK(dsv32::Histogram::number(1e-7) == "1e-07");
  CHECK(dsv32::Histogram::number(12345678) == "12345678");
}
