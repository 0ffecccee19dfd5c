// Oniguruma patterns compiled with PCRE2 (include/dsv32/tokenizer/regex.hpp). The expected pieces
// were produced by the reference implementation's Split(pattern, "isolated").pre_tokenize_str.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "dsv32/tokenizer/regex.hpp"

using dsv32::bpe::Regex;
using Pieces = std::vector<std::string>;

namespace {
Pieces split(std::string_view pattern, std::string_view text, Regex::Syntax syntax = Regex::Syntax::oniguruma) {
  const Regex regex(pattern, syntax, "test");
  Pieces out;
  dsv32::bpe::split_isolated(regex, text, [&](std::size_t b, std::size_t e) { out.emplace_back(text.substr(b, e - b)); });
  return out;
}
}  // namespace

TEST_CASE("regex: escapes mean what they mean in Oniguruma") {
  const std::string text = "a1\u0663\u0968b\u00b2x\nxy\nx";
  CHECK(split(R"(\d+)", text) == Pieces{"a", "1\u0663\u0968", "b\u00b2x\nxy\nx"});  // Unicode Nd, not No
  CHECK(split(R"([\d]+)", text) == Pieces{"a", "1\u0663\u0968", "b\u00b2x\nxy\nx"});
  CHECK(split("^x", text) == Pieces{"a1\u0663\u0968b\u00b2x\n", "x", "y\n", "x"});  // line anchors
  CHECK(split("x$", text) == Pieces{"a1\u0663\u0968b\u00b2", "x", "\nxy\n", "x"});
  CHECK(split(R"(\u0041+)", "bAAc") == Pieces{"b", "AA", "c"});
  // White_Space: U+0085 is, U+180E and U+200B are not.
  CHECK(split(R"(\s+)", "a\u180e\u180eb c\u0085d\u200be") ==
        Pieces{"a\u180e\u180eb", " ", "c", "\u0085", "d\u200be"});
  CHECK(split(R"([^\s]+)", "a\u180e b") == Pieces{"a\u180e", " ", "b"});
  CHECK(split(R"(\s+(?!\S))", "x   y") == Pieces{"x", "  ", " y"});
  CHECK(split("a.c", "abc a\nc") == Pieces{"abc", " a\nc"});  // '.' does not match '\n'
}

TEST_CASE("regex: literal String patterns and empty matches") {
  CHECK(split("a.", "xa.ya", Regex::Syntax::literal) == Pieces{"x", "a.", "ya"});
  CHECK(split("--", "a----b", Regex::Syntax::literal) == Pieces{"a", "--", "--", "b"});
  // An empty match splits the text where it occurs, like the reference's find_iter.
  CHECK(split("(?=b)", "abab") == Pieces{"a", "ba", "b"});
  CHECK(split("x*", "axxb") == Pieces{"a", "xx", "b"});
  CHECK(split("q", "").empty());
}

TEST_CASE("regex: translation of Oniguruma escapes") {
  using dsv32::bpe::translate_oniguruma_pattern;
  CHECK(translate_oniguruma_pattern(R"(\s+(?!\S)|[^\s\p{L}]|\\s)", "t") ==
        R"(\p{White_Space}+(?!\P{White_Space})|[^\p{White_Space}\p{L}]|\\s)");
  CHECK(translate_oniguruma_pattern(R"([]a][^]b][[:alpha:]x]\u00e9)", "t") == R"([]a][^]b][[:alpha:]x]\x{00e9})");
  CHECK(translate_oniguruma_pattern(R"([\b])", "t") == R"([\x08])");
  for (const char* bad : {R"(\w)", R"(\W)", R"(\bx)", R"(\h)", R"([a[b]])", R"([a-z&&[^aeiou]])"}) {
    CHECK_THROWS_WITH_AS(translate_oniguruma_pattern(bad, "file: field"), doctest::Contains("file: field: regex"),
                         dsv32::Error);
  }
  CHECK_THROWS_WITH_AS(translate_oniguruma_pattern(R"(ab\)", "f"), doctest::Contains("lone backslash"), dsv32::Error);
  CHECK_THROWS_WITH_AS(translate_oniguruma_pattern(R"(\u12)", "f"), doctest::Contains("4 hex digits"), dsv32::Error);
  CHECK_THROWS_WITH_AS(Regex("(", Regex::Syntax::oniguruma, "f"), doctest::Contains("f: invalid regex ("), dsv32::Error);
}

TEST_CASE("regex: long runs are matched without exhausting the JIT stack") {
  const std::string spaces(200000, ' ');
  const Pieces pieces = split(R"(\s+(?!\S)|\s+)", spaces + "x");
  REQUIRE(pieces.size() == 3);
  CHECK(pieces[0].size() == 199999);
  CHECK(pieces[1] == " ");
  CHECK(pieces[2] == "x");
}
