/// \file
/// \brief Loop parallelism of the CPU backend (OpenMP when the build enables it, serial otherwise).
#pragma once

#include <cstdint>

#if defined(_OPENMP)
#include <omp.h>
#define DSV32_OMP_FOR _Pragma("omp parallel for schedule(dynamic, 1)")
#else
#define DSV32_OMP_FOR
#endif

namespace dsv32::cpu {

/// \brief Calls `f(i)` for every i in [0, n), spread over the OpenMP threads when available.
///        Iterations must be independent.
template <class F>
void parallel_for(std::int64_t n, F&& f) {
#if defined(_OPENMP)
  if (n > 1 && !omp_in_parallel()) {
    DSV32_OMP_FOR
    for (std::int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#endif
  for (std::int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace dsv32::cpu
