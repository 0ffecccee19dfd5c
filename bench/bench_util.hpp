// Shared helpers of the benchmarks: median-of-N timing.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace dsv32::bench {

/// Runs f() `reps` times (after one warm-up) and returns the median wall time in milliseconds.
template <class F>
double median_ms(int reps, F&& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace dsv32::bench
