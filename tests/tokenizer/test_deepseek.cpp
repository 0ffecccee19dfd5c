// The DeepSeek-V3 tokenizer against its case files: encode_cases.json and chat_cases.json (shipped
// with the tokenizer) and reference_cases.json (made by the reference implementation, see
// make_reference_cases.py); decoding, streaming decoding and the errors of encode/decode.
#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "deepseek.hpp"

using Ids = std::vector<std::int32_t>;
using deepseek::cases;
using deepseek::tokenizer;

namespace {
/// Decodes `ids` one id at a time.
std::string stream_decode(const Ids& ids, bool skip_special) {
  auto decoder = tokenizer().stream_decoder(skip_special);
  std::string text;
  for (std::int32_t id : ids) text += decoder.push(id);
  return text + decoder.finish();
}
}  // namespace

TEST_CASE("deepseek: basic properties") {
  const auto& tok = tokenizer();
  CHECK(tok.vocab_size() == 128815);
  CHECK(tok.bos_id() == 0);
  CHECK(tok.eos_id() == 1);
  CHECK(tok.pad_id() == 1);
  CHECK(tok.add_bos_token());
  CHECK_FALSE(tok.add_eos_token());
  CHECK(tok.id_to_token(0) == "<｜begin▁of▁sentence｜>");
  CHECK(tok.id_to_token(128803) == "<｜User｜>");
  CHECK(tok.id_to_token(128814) == "<｜tool▁sep｜>");
  CHECK(tok.id_to_token(19923) == "Hello");
  CHECK(tok.token_to_id("<｜Assistant｜>") == 128804);
  CHECK(tok.token_to_id("Ġworld") == 2058);
  CHECK_FALSE(tok.id_to_token(128815).has_value());
  CHECK_FALSE(tok.id_to_token(-1).has_value());
  CHECK(tok.is_special(0));
  CHECK(tok.is_special(1));
  CHECK(tok.is_special(128805));  // <|EOT|>
  CHECK(tok.is_special(128000));  // placeholders
  CHECK_FALSE(tok.is_special(128803));  // <｜User｜> is not special
  CHECK_FALSE(tok.is_special(19923));
  CHECK(tok.added_tokens().size() == 818);
  CHECK(tok.encode("hi", true) == Ids{0, 6366});
}

TEST_CASE("deepseek: every case of encode_cases.json encodes to its ids and decodes back") {
  const auto& file = cases("encode_cases.json");
  REQUIRE(file.at("add_special_tokens") == false);
  REQUIRE(file.at("cases").size() == 66);
  for (const auto& c : file.at("cases")) {
    const std::string text = c.at("text");
    const Ids ids = c.at("ids");
    INFO("text: " << text);
    CHECK(tokenizer().encode(text) == ids);
    CHECK(tokenizer().decode(ids) == text);
    CHECK(stream_decode(ids, false) == text);
    CHECK(stream_decode(ids, true) == tokenizer().decode(ids, true));
  }
}

TEST_CASE("deepseek: reference_cases.json (made by the reference implementation)") {
  const auto& file = cases("reference_cases.json");
  REQUIRE(file.at("encode").size() == 400);  // the loops below must not pass on a truncated file
  REQUIRE(file.at("decode").size() == 200);
  for (const auto& c : file.at("encode")) {
    const std::string text = c.at("text");
    INFO("text: " << nlohmann::json(text).dump());
    CHECK(tokenizer().encode(text) == c.at("ids").get<Ids>());
  }
  for (const auto& c : file.at("decode")) {
    const Ids ids = c.at("ids");
    INFO("ids: " << c.at("ids").dump());
    CHECK(tokenizer().decode(ids) == c.at("text").get<std::string>());
    CHECK(tokenizer().decode(ids, true) == c.at("text_skip_special").get<std::string>());
    CHECK(stream_decode(ids, false) == c.at("text").get<std::string>());
    CHECK(stream_decode(ids, true) == c.at("text_skip_special").get<std::string>());
  }
}

TEST_CASE("deepseek: streaming holds back an incomplete character") {
  const Ids emoji = tokenizer().encode("😀");
  REQUIRE(emoji == Ids{28927, 225});
  auto decoder = tokenizer().stream_decoder();
  CHECK(decoder.push(19923) == "Hello");
  CHECK(decoder.push(emoji[0]).empty());
  CHECK(decoder.has_pending());
  CHECK(decoder.push(emoji[1]) == "😀");
  CHECK_FALSE(decoder.has_pending());
  CHECK(decoder.push(emoji[0]).empty());
  CHECK(decoder.push(19923) == "\xEF\xBF\xBDHello");  // the cut character is replaced, as decode() does
  CHECK(decoder.push(emoji[0]).empty());
  CHECK(decoder.finish() == "\xEF\xBF\xBD");
  CHECK(decoder.push(19923) == "Hello");  // finish() started a new stream
}

TEST_CASE("deepseek: decode with and without special tokens") {
  const Ids ids = {0, 128803, 19923, 128804, 1, 128805};
  CHECK(tokenizer().decode(ids) == "<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜><｜end▁of▁sentence｜><|EOT|>");
  CHECK(tokenizer().decode(ids, true) == "<｜User｜>Hello<｜Assistant｜>");
  CHECK(tokenizer().decode(Ids{}).empty());
}

TEST_CASE("deepseek: invalid UTF-8 input is refused with its offset") {
  for (const std::string bad : {"abc\xFF", "abc\xC3", "ab\xED\xA0\x80z", "abc\xC0\x80"}) {
    INFO(nlohmann::json::binary({bad.begin(), bad.end()}).dump());
    try {
      (void)tokenizer().encode(bad);
      FAIL("no error");
    } catch (const dsv32::Error& e) {
      CHECK(e.kind() == dsv32::ErrorKind::invalid_argument);
      CHECK(std::string(e.what()).find("not valid UTF-8") != std::string::npos);
      CHECK(std::string(e.what()).find(bad[2] == 'c' ? "at offset 3" : "at offset 2") != std::string::npos);
    }
  }
  CHECK_THROWS_WITH_AS((void)tokenizer().encode("\xFF"), "dsv32 [invalid_argument]: encode: input is not valid UTF-8: byte 0xFF at offset 0 of 1", dsv32::Error);
}

TEST_CASE("deepseek: unknown ids are refused by decode and the stream decoder") {
  CHECK_THROWS_WITH_AS((void)tokenizer().decode(Ids{19923, 128815}),
                       "dsv32 [invalid_argument]: decode: token id 128815 at position 1 is outside the tokenizer's vocabulary [0, 128815)",
                       dsv32::Error);
  CHECK_THROWS_WITH_AS((void)tokenizer().decode(Ids{-3}), doctest::Contains("token id -3 at position 0 is outside the tokenizer's vocabulary [0, 128815)"),
                       dsv32::Error);
  auto decoder = tokenizer().stream_decoder();
  CHECK(decoder.push(28927).empty());
  CHECK_THROWS_WITH_AS((void)decoder.push(129279), doctest::Contains("StreamDecoder::push: token id 129279"), dsv32::Error);
  CHECK(decoder.push(225) == "😀");  // the refused id left the decoder as it was
}

TEST_CASE("deepseek: concurrent encoding from several threads gives the same ids") {
  const auto& all = cases("reference_cases.json").at("encode");
  REQUIRE(all.size() == 400);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (const auto& c : all) mismatches[t] += tokenizer().encode(c.at("text").get<std::string>()) != c.at("ids").get<Ids>();
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(mismatches == std::vector<int>(4, 0));
}

TEST_CASE("deepseek: long inputs (runs of whitespace, digits, one long word)") {
  const std::string spaces(100000, ' ');
  const Ids ids = tokenizer().encode(spaces + "x");
  CHECK(tokenizer().decode(ids) == spaces + "x");
  const std::string newlines = std::string(50000, '\n') + std::string(50000, ' ') + "\n";
  CHECK(tokenizer().decode(tokenizer().encode(newlines)) == newlines);
  std::string digits;
  for (int i = 0; i < 30000; ++i) digits += char('0' + i % 10);
  const Ids digit_ids = tokenizer().encode(digits);
  CHECK(digit_ids.size() == 10000);  // groups of three
  CHECK(tokenizer().decode(digit_ids) == digits);
  const std::string word(20000, 'q');
  CHECK(tokenizer().decode(tokenizer().encode(word)) == word);
}

TEST_CASE("deepseek: the scan and heap merge loops give the same ids") {
  const nlohmann::json file = dsv32::bpe::read_json_file(deepseek::data_dir() + "/tokenizer.json");
  const dsv32::bpe::JsonNode root(file, "tokenizer.json");
  const auto model = dsv32::bpe::parse_bpe_model(root.at("model"), 0);
  const auto pre = dsv32::bpe::parse_pre_tokenizer(root.at("pre_tokenizer"));
  std::vector<std::string> pieces;
  for (const auto& c : cases("encode_cases.json").at("cases")) {
    pre.pre_tokenize(c.at("text").get<std::string>(), [&](std::string_view p) { pieces.emplace_back(p); });
  }
  for (const auto& c : cases("reference_cases.json").at("encode")) {
    pre.pre_tokenize(c.at("text").get<std::string>(), [&](std::string_view p) { pieces.emplace_back(p); });
  }
  std::uint32_t state = 12345;  // a fixed LCG: the same pieces on every platform
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  static constexpr std::string_view letters = "etaoinshrdlucmfwyp   \n\t0123456789.,;'";
  for (int i = 0; i < 3000; ++i) {
    std::string word;
    const std::size_t length = 1 + next() % 200;
    for (std::size_t k = 0; k < length; ++k) {
      word += i % 3 == 0 ? static_cast<char>(next() >> 24) : letters[(next() >> 16) % letters.size()];
    }
    pieces.push_back(word);
  }
  int mismatches = 0;
  for (const auto& piece : pieces) {
    Ids by_scan;
    Ids by_heap;
    model->merge_by_scan(piece, by_scan);
    model->merge_by_heap(piece, by_heap);
    mismatches += by_scan != by_heap;
  }
  CHECK(pieces.size() > 4000);
  CHECK(mismatches == 0);
}
