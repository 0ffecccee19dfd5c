/// \file
/// \brief Host loops over all OpenMP threads: parallel_for_each() (host work such as filling tensors
///        with counter-based random numbers, which gives the same values on any thread count).
#pragma once

#include <cstdint>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace dsv32 {

/// \addtogroup core
/// @{

/// \brief Calls `f(i)` for every i in [0, n), on all OpenMP threads when the build has OpenMP (host
///        work such as filling tensors; iterations must be independent).
/// \tparam F callable as `f(std::int64_t i)`
template <class F>
void parallel_for_each(std::int64_t n, F&& f) {
#if defined(_OPENMP)
  if (n > 1 && !omp_in_parallel()) {
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#endif
  for (std::int64_t i = 0; i < n; ++i) f(i);
}

/// @}

}  // namespace dsv32
