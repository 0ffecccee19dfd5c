// Bit-identity of float arrays, for tests that assert exact equality with a message showing the
// first difference (tests/golden, tests/layers/test_layers_oracle.cpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

namespace dsv32::test {

/// Where two float arrays first differ in their bits (first < 0: nowhere, or the sizes differ:
/// `total` is then -1), how many differ, and the largest |difference|.
struct BitDiff {
  std::int64_t first = -1;
  float ours = 0, expected = 0;
  std::int64_t differing = 0, total = 0;
  double max_abs = 0;

  bool identical() const { return first < 0 && total >= 0; }
  /// "what: bit-identical (N values)" or the count, the first differing index with both values (and
  /// their bits) and the largest |difference|.
  std::string describe(const std::string& what) const {
    std::ostringstream os;
    if (total < 0) return what + ": the sizes differ";
    if (identical()) return what + ": bit-identical (" + std::to_string(total) + " values)";
    os << what << ": " << differing << " of " << total << " values differ in their bits, first at index " << first
       << ": ours " << std::setprecision(9) << ours << " (0x" << std::hex << std::bit_cast<std::uint32_t>(ours)
       << "), expected " << std::dec << expected << " (0x" << std::hex << std::bit_cast<std::uint32_t>(expected)
       << std::dec << "); max |difference| " << max_abs;
    return os.str();
  }
};

inline BitDiff bit_diff(const std::vector<float>& ours, const std::vector<float>& expected) {
  BitDiff d;
  if (ours.size() != expected.size()) {
    d.total = -1;
    return d;
  }
  d.total = static_cast<std::int64_t>(expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (std::bit_cast<std::uint32_t>(ours[i]) == std::bit_cast<std::uint32_t>(expected[i])) continue;
    if (d.first < 0) {
      d.first = static_cast<std::int64_t>(i);
      d.ours = ours[i];
      d.expected = expected[i];
    }
    ++d.differing;
    d.max_abs = std::max(d.max_abs, std::fabs(static_cast<double>(ours[i]) - expected[i]));
  }
  return d;
}

/// Distance of two finite f32 values in units in the last place.
inline std::int64_t ulps(float a, float b) {
  auto ordered = [](float v) {
    const auto i = static_cast<std::int64_t>(std::bit_cast<std::int32_t>(v));
    return i < 0 ? std::int64_t{INT32_MIN} - i : i;
  };
  const std::int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

}  // namespace dsv32::test
