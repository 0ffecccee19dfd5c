// Fuzz target: Tokenizer::decode() and StreamDecoder on arbitrary id sequences of the DeepSeek-V3
// tokenizer. The input is read as little-endian 32-bit ids; an id outside the vocabulary (or
// negative) must be refused with an Error, by decode() and by StreamDecoder::push() (which must
// then be usable as before). The streamed text must equal decode()'s, with and without special
// tokens, and be valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "deepseek_tokenizer.hpp"
#include "fuzz_support.hpp"

// Loading happens once, before fuzzing starts, so that libFuzzer's per-input timeout does not count it.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)dsv32::fuzz::deepseek_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dsv32;
  const Tokenizer& tok = fuzz::deepseek_tokenizer();
  // The first byte picks how ids are read: most inputs then land inside the vocabulary.
  if (size < 1) return 0;
  const bool wide = data[0] & 1;
  const bool skip_special = data[0] & 2;
  std::vector<std::int32_t> ids;
  for (std::size_t i = 1; i + (wide ? 4 : 3) <= size; i += wide ? 4 : 3) {
    if (wide) {
      std::uint32_t v;
      std::memcpy(&v, data + i, 4);
      ids.push_back(static_cast<std::int32_t>(v));
    } else {  // 3 bytes: 0 .. 16,777,215, ids mostly below 131,072 (the vocabulary is 128,815)
      const std::uint32_t v = data[i] | (data[i + 1] << 8) | ((data[i + 2] & 0x01u) << 16);
      ids.push_back(static_cast<std::int32_t>(v));
    }
  }
  bool all_known = true;
  for (std::int32_t id : ids) all_known = all_known && tok.contains(id);

  std::string text;
  FUZZ_CHECK(fuzz::accepts([&] { text = tok.decode(ids, skip_special); }) == all_known);
  auto stream = tok.stream_decoder(skip_special);
  std::string streamed;
  for (std::int32_t id : ids) {
    const bool pending = stream.has_pending();
    if (!fuzz::accepts([&] { streamed += stream.push(id); })) {
      FUZZ_CHECK(!tok.contains(id) && stream.has_pending() == pending);  // refused, decoder unchanged
    }
  }
  streamed += stream.finish();
  FUZZ_CHECK(utf8::is_valid(streamed));
  if (all_known) {
    FUZZ_CHECK(utf8::is_valid(text));
    FUZZ_CHECK(streamed == text);
  }
  return 0;
}
