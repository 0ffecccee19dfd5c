// Fuzz target: loading a tokenizer from tokenizer.json and tokenizer_config.json
// (Tokenizer::from_files). The input holds both files, separated by a NUL byte (which no JSON text
// contains): `tokenizer.json \0 tokenizer_config.json`; without a NUL the config is `{}`. What
// loads must then encode, decode and render a chat without breaking its own invariants.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <dsv32/tokenizer.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dsv32;
  const std::string_view input = fuzz::as_text(data, size);
  const std::size_t nul = input.find('\0');
  const auto tokenizer_json = fuzz::scratch().write("tokenizer.json", input.substr(0, nul));
  const auto config_json =
      fuzz::scratch().write("tokenizer_config.json", nul == std::string_view::npos ? "{}" : input.substr(nul + 1));
  TokenizerOptions options;
  options.cache_capacity = 64;
  options.require_known_chat_template = false;
  std::optional<Tokenizer> tok;
  if (!fuzz::accepts([&] { tok.emplace(Tokenizer::from_files(tokenizer_json, config_json, options)); })) return 0;

  // Every id below vocab_size either has a token or is refused; decoding what encode gave is the text.
  for (const std::string text : {"Hello, world! 123 456", "  tabs\tand\nnewlines\r\n", "héllo 世界 🙂", "<｜User｜>hi"}) {
    std::vector<std::int32_t> ids;
    if (!fuzz::accepts([&] { ids = tok->encode(text, true); })) continue;
    for (std::int32_t id : ids) FUZZ_CHECK(tok->contains(id));
    fuzz::accepts([&] { (void)tok->decode(ids); });
  }
  const auto n = static_cast<std::int32_t>(std::min<std::size_t>(tok->vocab_size(), 512));
  auto stream = tok->stream_decoder();
  std::string streamed;
  std::vector<std::int32_t> known;
  for (std::int32_t id = 0; id < n; ++id) {
    if (!tok->contains(id)) {
      FUZZ_CHECK(!fuzz::accepts([&] { (void)tok->decode(std::vector<std::int32_t>{id}); }));
      continue;
    }
    known.push_back(id);
    streamed += stream.push(id);
    FUZZ_CHECK(tok->token_to_id(std::string(*tok->id_to_token(id))).has_value());
  }
  streamed += stream.finish();
  FUZZ_CHECK(streamed == tok->decode(known));
  FUZZ_CHECK(!fuzz::accepts([&] { (void)tok->decode(std::vector<std::int32_t>{-1}); }));
  const std::vector<ChatMessage> chat = {{"system", "be brief"}, {"user", "hi"}, {"assistant", "hello"}};
  fuzz::accepts([&] { (void)tok->encode_chat(chat, true); });
  return 0;
}
