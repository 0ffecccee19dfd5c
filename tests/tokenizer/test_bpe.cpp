// BPE merge order, added-token flags and pre-tokenizer steps on the tiny hand-made tokenizer of
// tiny_tokenizer.hpp. The expected ids were produced by the reference implementation (Hugging
// Face tokenizers 0.23.3) on the same tokenizer.json; the merge-order ones are also derived by
// hand in the comments.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "dsv32/tokenizer/tokenizer.hpp"
#include "tiny_tokenizer.hpp"

using Ids = std::vector<std::int32_t>;

namespace {
dsv32::Tokenizer load(const tiny::Spec& spec = {}) {
  return dsv32::Tokenizer::from_json(tiny::tokenizer_json(spec), tiny::config_json());
}
std::int32_t m(const std::string& token) { return tiny::id_of_merged(token); }
}  // namespace

TEST_CASE("bpe: merges apply by rank, not left to right") {
  const auto tok = load();
  // a b c d: (b,c) has rank 0 -> a bc d; (bc,d) rank 2 -> a bcd; (a,bcd) rank 3 -> abcd.
  // Left to right would have merged (a,b) (rank 1) first and got stuck at ab c d.
  CHECK(tok.encode("abcd") == Ids{m("abcd")});
  // (a,b) rank 1, then (ab,d) is no merge: "abd" is in the vocabulary but unreachable.
  CHECK(tok.encode("abd") == Ids{m("ab"), 'd'});
  // x y z: (x,y) rank 7 beats (y,z) rank 8, then (xy,z) rank 9.
  CHECK(tok.encode("xyz") == Ids{m("xyz")});
}

TEST_CASE("bpe: equal ranks merge leftmost first") {
  const auto tok = load();
  CHECK(tok.encode("aaa") == Ids{m("aa"), 'a'});
  CHECK(tok.encode("aaaa") == Ids{m("aaaa")});
  CHECK(tok.encode("aaaaa") == Ids{m("aaaa"), 'a'});
  CHECK(tok.encode(" a") == Ids{m("Ġa")});
  CHECK(tok.encode("a a") == Ids{'a', m("Ġa")});
}

TEST_CASE("bpe: ignore_merges emits a whole-piece vocabulary token first") {
  const auto tok = load({.ignore_merges = true});
  CHECK(tok.encode("abd") == Ids{m("abd")});
  CHECK(tok.encode("aaa") == Ids{m("aa"), 'a'});  // "aaa" is not in the vocabulary: merges as usual
}

TEST_CASE("bpe: Split steps (regex and literal) cut pieces before merging") {
  const auto tok = load();
  CHECK(tok.encode("12345") == Ids{'1', '2', '3', '4', '5'});
  CHECK(tok.encode("a--b") == Ids{'a', '-', '-', 'b'});
  CHECK(tok.encode("hello world") == Ids{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'});
  CHECK(tok.encode("  ab") == Ids{' ', ' ', m("ab")});
}

TEST_CASE("bpe: ByteLevel use_regex and add_prefix_space") {
  const auto tok = load({.add_prefix_space = true, .use_regex = true});
  CHECK(tok.encode("abcd") == Ids{' ', m("abcd")});
  CHECK(tok.encode("a a") == Ids{m("Ġa"), m("Ġa")});
  CHECK(tok.encode("12345") == Ids{' ', '1', '2', '3', ' ', '4', '5'});  // each Split piece gets a space
  CHECK(tok.encode("12a") == Ids{' ', '1', '2', m("Ġa")});
  CHECK(tok.encode("a--b") == Ids{m("Ġa"), ' ', '-', '-', ' ', 'b'});
  CHECK(tok.encode("  ab") == Ids{' ', ' ', m("ab")});
  CHECK(tok.encode("<<<") == Ids{tiny::angles, ' ', '<'});
  CHECK(tok.encode("hello world") == Ids{' ', 'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'});
}

TEST_CASE("bpe: added tokens are matched leftmost-longest, raw pass before normalized pass") {
  const auto tok = load();
  CHECK(tok.encode("<s>ab</s>") == Ids{tiny::bos, m("ab"), tiny::eos});
  CHECK(tok.encode("<s>x") == Ids{tiny::bos, 'x'});  // "<s>" (raw pass) wins over longer "<s>x"
  CHECK(tok.encode("<<<") == Ids{tiny::angles, '<'});
  CHECK(tok.encode("<<s>") == Ids{'<', tiny::bos});
  CHECK(tok.encode("<s>ab", true) == Ids{tiny::bos, tiny::bos, m("ab")});  // add_bos_token
}

TEST_CASE("bpe: single_word added tokens need non-word neighbours") {
  const auto tok = load();
  CHECK(tok.encode("[W]") == Ids{tiny::single_word});
  CHECK(tok.encode("a [W] b") == Ids{'a', ' ', tiny::single_word, ' ', 'b'});
  CHECK(tok.encode("-[W]-") == Ids{'-', tiny::single_word, '-'});
  CHECK(tok.encode("a[W]b") == Ids{'a', '[', 'W', ']', 'b'});
  CHECK(tok.encode("_[W]") == Ids{'_', '[', 'W', ']'});                      // connector punctuation
  CHECK(tok.encode("é[W]") == Ids{195, 169, '[', 'W', ']'});                 // letter
  CHECK(tok.encode("[W]\u0301") == Ids{'[', 'W', ']', 204, 129});           // combining mark
  CHECK(tok.encode("\u2160[W]") == Ids{226, 133, 160, '[', 'W', ']'});      // Nl is Alphabetic
  CHECK(tok.encode("a\u200d[W]") == Ids{'a', 226, 128, 141, '[', 'W', ']'});  // join control
  CHECK(tok.encode("\u00b2[W]") == Ids{194, 178, tiny::single_word});       // No is not a word char
  CHECK(tok.encode("a\u180e[W]") == Ids{'a', 225, 160, 142, tiny::single_word});
}

TEST_CASE("bpe: lstrip / rstrip added tokens absorb Unicode whitespace") {
  const auto tok = load();
  CHECK(tok.encode("x <m> y") == Ids{'x', tiny::strip, 'y'});
  CHECK(tok.encode("x\t\u3000<m>\u2003\n y") == Ids{'x', tiny::strip, 'y'});
  CHECK(tok.encode("x <m>  <m> y") == Ids{'x', tiny::strip, tiny::strip, 'y'});
  CHECK(tok.encode("<m><m>") == Ids{tiny::strip, tiny::strip});
  CHECK(tok.encode("é<m>") == Ids{195, 169, tiny::strip});
  CHECK(tok.encode("a\u180e<m>") == Ids{'a', 225, 160, 142, tiny::strip});  // U+180E is not White_Space
}

TEST_CASE("bpe: decoding the tiny tokenizer") {
  const auto tok = load();
  const Ids ids = {tiny::bos, m("abcd"), ' ', tiny::strip, 195, 169, tiny::eos};
  CHECK(tok.decode(ids) == "<s>abcd <m>é</s>");
  CHECK(tok.decode(ids, true) == "abcd <m>é");
  CHECK(tok.vocab_size() == 273);
  CHECK(tok.bos_id() == tiny::bos);
  CHECK(tok.eos_id() == tiny::eos);
  CHECK_FALSE(tok.pad_id().has_value());
  CHECK(tok.is_special(tiny::bos));
  CHECK_FALSE(tok.is_special(tiny::strip));
  CHECK_FALSE(tok.is_special('a'));
  CHECK(tok.id_to_token(' ') == "Ġ");
  CHECK(tok.id_to_token(m("Ġa")) == "Ġa");
  CHECK(tok.token_to_id("<m>") == tiny::strip);
  CHECK(tok.token_to_id("aaaa") == m("aaaa"));
  CHECK_FALSE(tok.token_to_id("nope").has_value());
}

TEST_CASE("bpe: the word cache does not change results, whatever its size") {
  const std::vector<std::string> texts = {"abcd aaaa xyz", "aaaaa abd", "abcd aaaa xyz", " a a a"};
  const auto reference = load();
  for (std::size_t capacity : {0, 1, 2, 1000}) {
    const auto tok = dsv32::Tokenizer::from_json(tiny::tokenizer_json(), tiny::config_json(),
                                                 {.cache_capacity = capacity});
    for (int round = 0; round < 3; ++round) {
      for (const auto& text : texts) CHECK(tok.encode(text) == reference.encode(text));
    }
  }
}

TEST_CASE("bpe: MergeTable finds every pair and grows") {
  dsv32::bpe::MergeTable table(2);
  for (std::int32_t i = 0; i < 1000; ++i) table.insert_or_assign(i, i + 1, {std::uint32_t(i), i + 2});
  table.insert_or_assign(5, 6, {1234, 99});  // a later rule for the same pair wins
  CHECK(table.size() == 1000);
  for (std::int32_t i = 0; i < 1000; ++i) {
    const auto* merge = table.find(i, i + 1);
    REQUIRE(merge != nullptr);
    CHECK(merge->new_id == (i == 5 ? 99 : i + 2));
  }
  CHECK(table.find(1, 0) == nullptr);
  CHECK(table.find(0, 2) == nullptr);
}
