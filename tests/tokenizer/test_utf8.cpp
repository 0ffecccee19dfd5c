// UTF-8 validation and lossy decoding (include/dsv32/tokenizer/utf8.hpp).
#include <doctest/doctest.h>

#include <string>
#include <string_view>

#include "dsv32/tokenizer/utf8.hpp"

namespace utf8 = dsv32::utf8;
using namespace std::string_literals;

namespace {
const std::string fffd(utf8::replacement_character);
}

TEST_CASE("utf8: find_invalid accepts UTF-8 and locates the first bad byte") {
  CHECK(utf8::is_valid(""));
  CHECK(utf8::is_valid("plain ASCII"));
  CHECK(utf8::is_valid("é中😀\xF4\x8F\xBF\xBF"));  // includes U+10FFFF
  CHECK(utf8::find_invalid("ab\x80") == 2);         // stray continuation byte
  CHECK(utf8::find_invalid("a\xC0\x80") == 1);      // overlong NUL
  CHECK(utf8::find_invalid("\xE0\x9F\xBF") == 0);   // overlong 3-byte
  CHECK(utf8::find_invalid("x\xED\xA0\x80") == 1);  // surrogate U+D800
  CHECK(utf8::find_invalid("\xF4\x90\x80\x80") == 0);  // above U+10FFFF
  CHECK(utf8::find_invalid("\xF5\x80\x80\x80") == 0);
  CHECK(utf8::find_invalid("ok\xF0\x9F\x98") == 2);  // truncated at the end
  CHECK(utf8::find_invalid("\xFF") == 0);
}

TEST_CASE("utf8: append_code_point encodes every length") {
  std::string s;
  for (char32_t cp : {U'\x41', U'\xE9', U'\x4E2D', U'\x1F600', U'\x10FFFF'}) utf8::append_code_point(s, cp);
  CHECK(s == "Aé中😀\xF4\x8F\xBF\xBF");
}

TEST_CASE("utf8: lossy decoding replaces each maximal invalid subpart by one U+FFFD") {
  // The examples of Unicode 15 §3.9 (Table 3-8) and Rust's String::from_utf8_lossy.
  CHECK(utf8::decode_lossy("Hello\xF0\x90\x80World") == "Hello" + fffd + "World");  // truncated 4-byte: one
  CHECK(utf8::decode_lossy("\xE0\x80") == fffd + fffd);                              // E0 needs A0..BF
  CHECK(utf8::decode_lossy("\xED\xA0\x80") == fffd + fffd + fffd);                   // surrogate: three
  CHECK(utf8::decode_lossy("\xC0\xAF") == fffd + fffd);
  CHECK(utf8::decode_lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64") ==
        "a" + fffd + fffd + fffd + "b" + fffd + "c" + fffd + fffd + "d");
  CHECK(utf8::decode_lossy("\xF0\x9F\x98") == fffd);  // truncated at the end: one
  CHECK(utf8::decode_lossy("fine é") == "fine é");
}

TEST_CASE("utf8: streaming lossy decoding agrees with whole decoding at every split") {
  const std::string bytes = "a\xF0\x9F\x98\x80\xE4\xB8\xAD\xFF\xE0\x80z\xF0\x90\x80"s;
  const std::string whole = utf8::decode_lossy(bytes);
  for (std::size_t cut = 0; cut <= bytes.size(); ++cut) {
    std::string out;
    std::string pending = bytes.substr(0, cut);
    pending.erase(0, utf8::append_lossy(out, pending, false));
    CHECK(pending.size() <= 3);
    pending += bytes.substr(cut);
    utf8::append_lossy(out, pending, true);
    CHECK(out == whole);
  }
}
