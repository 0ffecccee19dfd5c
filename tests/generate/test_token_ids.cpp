// parse_token_ids: the token-id text of dsv32-generate (--prompt-ids, batch files) and dsv32-demo.
#include "dsv32/generate/token_ids.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "support/test_support.hpp"

using dsv32::ErrorKind;
using dsv32::parse_token_ids;
using dsv32::test::check_error;
using Ids = std::vector<std::int32_t>;

TEST_CASE("parse_token_ids: decimal ids separated by spaces, tabs, line breaks or commas") {
  CHECK(parse_token_ids("97 260 130") == Ids{97, 260, 130});
  CHECK(parse_token_ids("97,260,130") == Ids{97, 260, 130});
  CHECK(parse_token_ids(" 4, 5,\t6\r\n7 ,,8 ") == Ids{4, 5, 6, 7, 8});
  CHECK(parse_token_ids("0 2147483647") == Ids{0, 2147483647});
  CHECK(parse_token_ids("007") == Ids{7});
  CHECK(parse_token_ids("").empty());
  CHECK(parse_token_ids(" ,\n").empty());
}

TEST_CASE("parse_token_ids: anything else is refused, naming the word and its place") {
  check_error([] { (void)parse_token_ids("1 x", "--prompt-ids"); }, ErrorKind::invalid_argument,
              {"--prompt-ids: 'x' (id 2) is not a token id: expected a decimal integer in [0, 2147483647]"});
  for (const char* bad : {"-1", "+1", "2147483648", "99999999999999999999", "0x10", "1.5", "1e3", "12a", "-", "−1"}) {
    CAPTURE(bad);
    check_error([&] { (void)parse_token_ids(std::string("5 ") + bad); }, ErrorKind::invalid_argument,
                {"token ids: '", "(id 2) is not a token id"});
  }
  // control bytes are escaped and long words shortened in the message
  check_error([] { (void)parse_token_ids(std::string("1\x01\x7f") + std::string(100, '9') + "z"); },
              ErrorKind::invalid_argument, {"'1\\x01\\x7f", "...' (id 1)"});
}
