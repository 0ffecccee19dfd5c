// Logits::row / argmax: an index outside the logits is a dsv32::Error, never an out-of-bounds read.
#include "dsv32/layers/transformer.hpp"

#include <doctest/doctest.h>

#include <vector>

#include "support/test_support.hpp"

using dsv32::ErrorKind;
using dsv32::test::check_error;

TEST_CASE("Logits: rows and argmax of [batch 2, positions 3, vocab 4]") {
  dsv32::Logits l{2, 3, 4, std::vector<float>(24)};
  for (std::size_t i = 0; i < l.values.size(); ++i) l.values[i] = static_cast<float>(i % 5);
  CHECK(l.row(0, 0)[0] == 0.0f);
  CHECK(l.row(1, 2)[3] == static_cast<float>(23 % 5));
  CHECK(l.row(1).data() == l.row(1, 2).data());  // the last position by default
  CHECK(l.row(0)[1] == 4.0f);                     // row 0 at position 2: values 8..11 % 5 = 3, 4, 0, 1
  CHECK(l.argmax(0) == 1);
}

TEST_CASE("Logits: an index outside the logits throws") {
  const dsv32::Logits l{2, 1, 4, std::vector<float>(8, 1.0f)};
  check_error([&] { (void)l.row(2); }, ErrorKind::invalid_argument, {"Logits::row: sequence 2 is outside [0, 2)"});
  check_error([&] { (void)l.row(-1); }, ErrorKind::invalid_argument, {"sequence -1 is outside [0, 2)"});
  check_error([&] { (void)l.row(0, 1); }, ErrorKind::invalid_argument, {"position 1 is outside [0, 1)"});
  check_error([&] { (void)l.row(0, -2); }, ErrorKind::invalid_argument, {"position -2 is outside [0, 1)"});
  check_error([&] { (void)l.argmax(5); }, ErrorKind::invalid_argument, {"sequence 5 is outside [0, 2)"});
  const dsv32::Logits empty{};
  check_error([&] { (void)empty.argmax(0); }, ErrorKind::invalid_argument, {"sequence 0 is outside [0, 0)"});
  const dsv32::Logits short_values{1, 1, 4, std::vector<float>(3)};
  check_error([&] { (void)short_values.row(0); }, ErrorKind::invalid_argument,
              {"3 values do not hold batch 1 x positions 1 x vocab 4"});
}
