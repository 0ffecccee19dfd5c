// Fuzz target: Tokenizer::encode() of the DeepSeek-V3 tokenizer on arbitrary bytes. Input that is
// not UTF-8 must be refused with an Error; UTF-8 input must encode to known ids that decode (at
// once and streamed) back to exactly the input — byte-level BPE loses nothing.
#include <cstddef>
#include <cstdint>
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
  const std::string_view text = fuzz::as_text(data, size);
  std::vector<std::int32_t> ids;
  const bool valid = utf8::is_valid(text);
  FUZZ_CHECK(fuzz::accepts([&] { ids = tok.encode(text); }) == valid);
  if (!valid) return 0;
  for (std::int32_t id : ids) FUZZ_CHECK(tok.contains(id));
  FUZZ_CHECK(tok.decode(ids) == text);
  auto stream = tok.stream_decoder();
  std::string streamed;
  for (std::int32_t id : ids) streamed += stream.push(id);
  streamed += stream.finish();
  FUZZ_CHECK(streamed == text);
  const std::vector<std::int32_t> with_bos = tok.encode(text, true);
  FUZZ_CHECK(with_bos.size() == ids.size() + 1 && with_bos.front() == *tok.bos_id());
  return 0;
}
