// Fuzz target: the chat input of dsv32-tokenize --chat, a JSON object
// {"messages": [{"role": ..., "content": ...}, ...], "add_generation_prompt": true|false},
// rendered with the DeepSeek-V3 chat template and encoded.
//
// read_chat_request() below follows tools/dsv32_tokenize.cpp step for step; when the tool's input
// format grows (thinking, tool calls, prefix), change it here the same way (or call the tool's
// parser once it is a library function) and add the new keys to fuzz/dict/chat.dict.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepseek_tokenizer.hpp"
#include "fuzz_support.hpp"

namespace {

struct ChatRequest {
  std::vector<dsv32::ChatMessage> messages;
  bool add_generation_prompt = false;
};

ChatRequest read_chat_request(std::string_view input) {
  using dsv32::ErrorKind;
  nlohmann::json request;
  try {
    request = nlohmann::json::parse(input);
  } catch (const nlohmann::json::exception& e) {  // syntax errors, and numbers past double's range
    dsv32::fail(ErrorKind::invalid_argument, "input is not valid JSON (expected a chat object): ", e.what());
  }
  if (!request.is_object())
    dsv32::fail(ErrorKind::invalid_argument, "expected a JSON object {\"messages\": [...]}, found ", request.type_name());
  const auto messages = request.find("messages");
  if (messages == request.end()) dsv32::fail(ErrorKind::invalid_argument, "missing field \"messages\"");
  ChatRequest out;
  if (const auto flag = request.find("add_generation_prompt"); flag != request.end()) {
    if (!flag->is_boolean())
      dsv32::fail(ErrorKind::invalid_argument, "\"add_generation_prompt\" must be true or false, found ", flag->dump());
    out.add_generation_prompt = flag->get<bool>();
  }
  out.messages = dsv32::chat_messages_from_json(*messages);
  return out;
}

}  // namespace

// Loading happens once, before fuzzing starts, so that libFuzzer's per-input timeout does not count it.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)dsv32::fuzz::deepseek_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dsv32;
  const Tokenizer& tok = fuzz::deepseek_tokenizer();
  ChatRequest request;
  if (!fuzz::accepts([&] { request = read_chat_request(fuzz::as_text(data, size)); })) return 0;
  std::string prompt;
  if (!fuzz::accepts([&] { prompt = tok.apply_chat_template(request.messages, request.add_generation_prompt); }))
    return 0;
  FUZZ_CHECK(prompt.starts_with("<｜begin▁of▁sentence｜>"));
  std::vector<std::int32_t> ids;
  if (!fuzz::accepts([&] { ids = tok.encode(prompt); })) return 0;  // contents that are not UTF-8
  FUZZ_CHECK(!ids.empty() && ids.front() == *tok.bos_id());
  FUZZ_CHECK(tok.decode(ids) == prompt);
  return 0;
}
