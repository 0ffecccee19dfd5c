// Fuzz target: dsv32::ChatOutputParser on DeepSeek-V3.2-Exp's replies (model output: untrusted),
// with the DeepSeek-V3.2-Exp tokenizer.
//
// Input: a mode byte (bit 0: the reply starts in reasoning, as after a thinking prompt; bit 1: the
// rest is token ids, 3 bytes each, else text), a split byte, then the reply. Bad output may only end
// in a dsv32::Error; the deltas must add up to output(), text fed whole, in two pieces (cut where the
// split byte says) and byte by byte must give the same output and the same verdict, and the deltas
// of token ids must be UTF-8.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "deepseek_tokenizer.hpp"
#include "fuzz_support.hpp"

namespace {

using dsv32::ChatOutput;
using dsv32::ChatOutputDelta;
using dsv32::ChatOutputParser;
using dsv32::ChatOutputState;

void add(ChatOutput& sum, const ChatOutputDelta& d) {
  sum.reasoning += d.reasoning;
  sum.content += d.content;
  sum.tool_calls.insert(sum.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
}

struct Run {
  bool ok = false;
  ChatOutput output;
};

// Feeds `chunks` as text; checks that the deltas add up to the output when the reply is accepted.
Run run_text(const std::vector<std::string_view>& chunks, ChatOutputState start) {
  ChatOutputParser parser(start);
  ChatOutput sum;
  Run r;
  r.ok = dsv32::fuzz::accepts([&] {
    for (const std::string_view c : chunks) add(sum, parser.push_text(c));
    add(sum, parser.finish());
  });
  r.output = parser.output();
  if (r.ok) {
    FUZZ_CHECK(sum == r.output);
    FUZZ_CHECK(parser.state() == ChatOutputState::ended);
  } else {
    FUZZ_CHECK(parser.state() == ChatOutputState::failed || parser.state() == ChatOutputState::ended);
  }
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)dsv32::fuzz::deepseek_v3_2_exp_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dsv32;
  if (size < 2) return 0;
  const ChatOutputState start = (data[0] & 1) ? ChatOutputState::reasoning : ChatOutputState::content;
  const bool ids_mode = data[0] & 2;
  const std::string_view text = fuzz::as_text(data + 2, size - 2);

  if (ids_mode) {
    const Tokenizer& tok = fuzz::deepseek_v3_2_exp_tokenizer();
    ChatOutputParser parser(tok, ChatFormat::deepseek_v3_2_exp, start);
    ChatOutput sum;
    const bool ok = fuzz::accepts([&] {
      for (const std::int32_t id : fuzz::ids_from_bytes(data + 2, size - 2)) {
        const ChatOutputDelta d = parser.push(id);
        FUZZ_CHECK(utf8::is_valid(d.reasoning) && utf8::is_valid(d.content));
        add(sum, d);
      }
      add(sum, parser.finish());
    });
    if (ok) FUZZ_CHECK(sum == parser.output());
    return 0;
  }

  const Run whole = run_text({text}, start);
  const std::size_t cut = text.size() * data[1] / 256;
  const Run two = run_text({text.substr(0, cut), text.substr(cut)}, start);
  FUZZ_CHECK(two.ok == whole.ok);
  if (whole.ok) FUZZ_CHECK(two.output == whole.output);
  if (text.size() <= 512) {
    std::vector<std::string_view> bytes;
    for (std::size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
    const Run each = run_text(bytes, start);
    FUZZ_CHECK(each.ok == whole.ok);
    if (whole.ok) FUZZ_CHECK(each.output == whole.output);
  }
  return 0;
}
