// Helpers shared by dsv32's test suites: expecting a dsv32::Error, temporary directories (temp_dir.hpp).
#pragma once

#include <doctest/doctest.h>

#include <dsv32/core/error.hpp>
#include <dsv32/core/numeric.hpp>

#include "support/temp_dir.hpp"

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace dsv32::test {

/// Runs f(), which must throw dsv32::Error of `kind`; returns its message (a failed CHECK otherwise).
template <class F>
std::string error_of(F&& f, ErrorKind kind) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.kind() == kind);
    return e.what();
  }
  FAIL("expected a dsv32::Error");
  return {};
}

/// Runs f(), which must throw dsv32::Error of `kind` whose message holds every piece of `parts`.
template <class F>
void check_error(F&& f, ErrorKind kind, const std::vector<std::string>& parts) {
  try {
    f();
    FAIL("expected dsv32::Error(", to_string(kind), ") but nothing was thrown");
  } catch (const Error& e) {
    const std::string what = e.what();
    INFO("message: ", what);
    CHECK(std::string(to_string(e.kind())) == to_string(kind));
    for (const std::string& p : parts) CHECK_MESSAGE(what.find(p) != std::string::npos, "missing: ", p);
  }
}

/// `n` bf16 values drawn from N(mean, sd).
inline std::vector<bf16> random_bf16(std::size_t n, std::mt19937& gen, float sd = 1.0f, float mean = 0.0f) {
  std::normal_distribution<float> d(mean, sd);
  std::vector<bf16> v(n);
  for (auto& x : v) x = bf16(d(gen));
  return v;
}

/// bf16 values as integers that order like the values: the distance between two is their ulp distance.
inline int ordered(bf16 v) {
  const auto b = Eigen::numext::bit_cast<std::uint16_t>(v);
  return (b & 0x8000u) ? -static_cast<int>(b & 0x7FFFu) : static_cast<int>(b);
}
/// Distance between two bf16 values in units in the last place.
inline int ulp_distance(bf16 a, bf16 b) { return std::abs(ordered(a) - ordered(b)); }

/// Whether `s` contains `part`.
inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

#if defined(DSV32_TEST_DATA)
/// tests/data/golden/ (with the trailing slash): the reference's vectors, copied from ../shared/golden.
inline const std::string kGoldenDir = std::string(DSV32_TEST_DATA) + "/golden/";
#endif

}  // namespace dsv32::test
