// The DeepSeek-V3.2-Exp tokenizer (V3's vocabulary with four named tokens) against its
// encode_cases.json; its chat template is tested in test_chat_template.cpp.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "deepseek.hpp"

using Ids = std::vector<std::int32_t>;

namespace {
using deepseek::v3_2_exp_tokenizer;
}  // namespace

TEST_CASE("deepseek-v3.2-exp: the four named tokens, and the rest as in DeepSeek-V3") {
  CHECK(v3_2_exp_tokenizer().vocab_size() == 128815);
  CHECK(v3_2_exp_tokenizer().bos_id() == 0);
  CHECK(v3_2_exp_tokenizer().eos_id() == 1);
  CHECK(v3_2_exp_tokenizer().pad_id() == 1);
  CHECK(v3_2_exp_tokenizer().added_tokens().size() == 818);
  CHECK(v3_2_exp_tokenizer().token_to_id("<｜search▁begin｜>") == 128796);
  CHECK(v3_2_exp_tokenizer().token_to_id("<｜search▁end｜>") == 128797);
  CHECK(v3_2_exp_tokenizer().token_to_id("<think>") == 128798);
  CHECK(v3_2_exp_tokenizer().token_to_id("</think>") == 128799);
  for (std::int32_t id = 128796; id <= 128799; ++id) {
    CHECK_FALSE(v3_2_exp_tokenizer().is_special(id));  // so skip_special_tokens keeps them
  }
  CHECK(v3_2_exp_tokenizer().is_special(128795));  // a placeholder still
  CHECK(v3_2_exp_tokenizer().token_to_id("<｜tool▁calls▁begin｜>") == 128806);
  CHECK(v3_2_exp_tokenizer().token_to_id("<｜tool▁sep｜>") == 128814);
  CHECK_FALSE(deepseek::tokenizer(deepseek::v3).token_to_id("<think>").has_value());
}

TEST_CASE("deepseek-v3.2-exp: every case of encode_cases.json encodes to its ids and decodes back") {
  const auto& all = deepseek::cases("encode_cases.json", deepseek::v3_2_exp).at("cases");
  REQUIRE(all.size() == 14);
  std::size_t checked = 0;
  for (const auto& c : all) {
    const std::string text = c.at("text");
    const Ids ids = c.at("ids");
    INFO("text: " << text);
    CHECK(v3_2_exp_tokenizer().encode(text) == ids);
    CHECK(v3_2_exp_tokenizer().decode(ids) == text);
    auto stream = v3_2_exp_tokenizer().stream_decoder();
    std::string streamed;
    for (std::int32_t id : ids) streamed += stream.push(id);
    CHECK(streamed + stream.finish() == text);
    ++checked;
  }
  CHECK(checked == 14);
}
