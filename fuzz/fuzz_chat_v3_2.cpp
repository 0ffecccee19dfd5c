// Fuzz target: DeepSeek-V3.2's chat encoding on request JSON (untrusted: what a client sends), as
// dsv32-tokenize --chat-format deepseek-v3.2 --chat reads it: python_json::loads(),
// deepseek_v3_2::request_from_json(), deepseek_v3_2::encode_messages(), then the tokenizer.
//
// Bad requests may only end in a dsv32::Error. A rendered prompt starts with the bos, encodes and
// decodes back exactly; the messages survive to_json() and messages_from_json() unchanged.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepseek_tokenizer.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)dsv32::fuzz::deepseek_v3_2_exp_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dsv32;
  const Tokenizer& tok = fuzz::deepseek_v3_2_exp_tokenizer();
  deepseek_v3_2::EncodeRequest request;
  if (!fuzz::accepts([&] {
        request = deepseek_v3_2::request_from_json(python_json::loads(fuzz::as_text(data, size), "request"));
      })) {
    return 0;
  }
  // The reader's messages, written back as JSON, read the same.
  const nlohmann::ordered_json written = request.messages;
  std::vector<ChatMessage> again;
  FUZZ_CHECK(fuzz::accepts([&] { again = deepseek_v3_2::messages_from_json(written); }));
  FUZZ_CHECK(again == request.messages);

  std::string prompt;
  if (!fuzz::accepts([&] { prompt = deepseek_v3_2::encode_messages(request.messages, request.options); })) return 0;
  FUZZ_CHECK(prompt.starts_with(deepseek_v3_2::tokens::bos));
  FUZZ_CHECK(utf8::is_valid(prompt));  // JSON strings are UTF-8
  const std::vector<std::int32_t> ids = tok.encode(prompt);
  FUZZ_CHECK(!ids.empty() && ids.front() == *tok.bos_id());
  FUZZ_CHECK(tok.decode(ids) == prompt);
  return 0;
}
