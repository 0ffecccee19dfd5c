// The GPT-2 byte-to-unicode map (include/dsv32/tokenizer/byte_level.hpp), in closed form.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "dsv32/tokenizer/byte_level.hpp"

using namespace dsv32::bpe;

TEST_CASE("byte_level: 256 entries, bijective") {
  std::set<char32_t> image(byte_to_unicode_table.begin(), byte_to_unicode_table.end());
  CHECK(byte_to_unicode_table.size() == 256);
  CHECK(image.size() == 256);
  for (unsigned b = 0; b < 256; ++b) CHECK(unicode_to_byte(byte_to_unicode(std::uint8_t(b))) == int(b));
  int preimages = 0;
  for (char32_t c = 0; c < 0x200; ++c) preimages += unicode_to_byte(c) >= 0;
  CHECK(preimages == 256);
  CHECK(unicode_to_byte(U'｜') == -1);
}

TEST_CASE("byte_level: printable Latin-1 maps to itself, the rest to U+0100.. in byte order") {
  char32_t next = 0x100;
  for (unsigned b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    if (printable) {
      CHECK(byte_to_unicode(std::uint8_t(b)) == char32_t(b));
    } else {
      CHECK(byte_to_unicode(std::uint8_t(b)) == next++);
    }
  }
  CHECK(next == 0x144);  // 68 moved bytes: 0x00-0x20, 0x7F-0xA0, 0xAD
  CHECK(byte_to_unicode(' ') == U'Ġ');
  CHECK(byte_to_unicode('\n') == U'Ċ');
  CHECK(byte_to_unicode('\t') == U'ĉ');
  CHECK(byte_to_unicode(0x00) == U'\x100');
  CHECK(byte_to_unicode(0x7F) == U'\x121');
  CHECK(byte_to_unicode(0xA0) == U'\x142');
  CHECK(byte_to_unicode(0xAD) == U'\x143');
}

TEST_CASE("byte_level: text round trip") {
  std::string all;
  for (unsigned b = 0; b < 256; ++b) all.push_back(char(b));
  const std::string encoded = byte_level_encode(all);
  CHECK(byte_level_decode(encoded) == all);
  CHECK(byte_level_encode(" the\n") == "ĠtheĊ");
  CHECK(byte_level_encode("é") == "Ã©");
  CHECK(byte_level_decode("Ġworld") == std::string(" world"));
  CHECK_FALSE(byte_level_decode("<｜User｜>").has_value());  // not byte-level text
  CHECK_FALSE(byte_level_decode("\xFF").has_value());          // not UTF-8
}
