// Fuzz target: DeepSeek-V3.2's reply parsers on model output (untrusted): the strict
// deepseek_v3_2::parse_completion() against the streaming deepseek_v3_2::CompletionScanner (and
// ChatOutputParser on token ids), two implementations of the module's grammar checked against
// each other.
//
// Input: a mode byte (bit 0: thinking mode; bit 1: the rest is token ids of the DeepSeek-V3.2
// tokenizer, 3 bytes each, else text), a split byte, then the reply. The strict parser may only
// throw dsv32::Error; the streaming one never throws (an id without a token aside). For UTF-8 text:
// the strict parser accepts exactly what the scanner calls complete(), with the same message, and
// then no text delta holds markup; every text delta is UTF-8; the deltas add up to output(); the
// text fed whole, in two pieces (cut where the split byte says) and byte by byte gives the same
// output, state and verdict; ids give what their decoded text gives.
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
using dsv32::deepseek_v3_2::CompletionScanner;
namespace tokens = dsv32::deepseek_v3_2::tokens;

bool has_markup(const std::string& s) {
  for (const std::string_view m : {tokens::dsml, tokens::think_begin, tokens::think_end, tokens::eos, tokens::bos}) {
    if (s.find(m) != std::string::npos) return true;
  }
  return false;
}

void add(ChatOutput& sum, const ChatOutputDelta& d) {
  sum.reasoning += d.reasoning;
  sum.content += d.content;
  sum.tool_calls.insert(sum.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
}

// Feeds `chunks` to a scanner; checks the deltas (UTF-8 when the text is; no markup when asked).
CompletionScanner scan(const std::vector<std::string_view>& chunks, bool thinking, bool utf8_text, bool markup_free) {
  CompletionScanner scanner(thinking);
  ChatOutput sum;
  const auto check = [&](const ChatOutputDelta& d) {
    if (utf8_text) FUZZ_CHECK(dsv32::utf8::is_valid(d.reasoning) && dsv32::utf8::is_valid(d.content));
    if (markup_free) FUZZ_CHECK(!has_markup(d.reasoning) && !has_markup(d.content));
    add(sum, d);
  };
  for (const std::string_view c : chunks) {
    ChatOutputDelta d;
    scanner.push(c, d);
    check(d);
  }
  ChatOutputDelta d;
  scanner.finish(d);
  check(d);
  FUZZ_CHECK(sum == scanner.output());
  FUZZ_CHECK(scanner.state() == dsv32::ChatOutputState::ended || scanner.state() == dsv32::ChatOutputState::malformed);
  FUZZ_CHECK((scanner.state() == dsv32::ChatOutputState::malformed) == !scanner.malformed_reason().empty());
  return scanner;
}

bool same(const CompletionScanner& a, const CompletionScanner& b) {
  return a.output() == b.output() && a.state() == b.state() && a.complete() == b.complete();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)dsv32::fuzz::deepseek_v3_2_exp_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dsv32;
  if (size < 2) return 0;
  const bool thinking = data[0] & 1;
  const bool ids_mode = data[0] & 2;

  if (ids_mode) {
    const Tokenizer& tok = fuzz::deepseek_v3_2_exp_tokenizer();
    const std::vector<std::int32_t> ids = fuzz::ids_from_bytes(data + 2, size - 2);
    ChatOutputParser parser(tok, ChatFormat::deepseek_v3_2,
                            thinking ? ChatOutputState::reasoning : ChatOutputState::content);
    std::vector<std::int32_t> known;
    ChatOutput sum;
    for (const std::int32_t id : ids) {
      if (!fuzz::accepts([&] { add(sum, parser.push(id)); })) {
        FUZZ_CHECK(!tok.contains(id));  // only an id without a token is refused
        continue;
      }
      known.push_back(id);
    }
    add(sum, parser.finish());
    FUZZ_CHECK(sum == parser.output());
    // Token by token = the decoded text at once.
    const std::string text = tok.decode(known);
    const CompletionScanner whole = scan({text}, thinking, true, false);
    FUZZ_CHECK(parser.output() == whole.output());
    FUZZ_CHECK(parser.state() == whole.state());
    return 0;
  }

  const std::string_view text = fuzz::as_text(data + 2, size - 2);
  const bool utf8_text = utf8::is_valid(text);
  ChatOutput strict;
  const bool accepted = fuzz::accepts([&] { strict = deepseek_v3_2::parse_completion(text, thinking); });
  const CompletionScanner whole = scan({text}, thinking, utf8_text, accepted);
  if (utf8_text) {
    FUZZ_CHECK(accepted == whole.complete());
    if (accepted) {
      FUZZ_CHECK(whole.output() == strict);
      FUZZ_CHECK(whole.state() == ChatOutputState::ended);
    }
  } else {
    FUZZ_CHECK(!accepted);
  }
  const std::size_t cut = text.size() * data[1] / 256;
  FUZZ_CHECK(same(scan({text.substr(0, cut), text.substr(cut)}, thinking, utf8_text, accepted), whole));
  if (text.size() <= 512) {
    std::vector<std::string_view> bytes;
    for (std::size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
    FUZZ_CHECK(same(scan(bytes, thinking, utf8_text, accepted), whole));
  }
  return 0;
}
