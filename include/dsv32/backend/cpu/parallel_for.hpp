/// \file
/// \brief Loop parallelism of the CPU backend (OpenMP when the build enables it, serial otherwise).
#pragma once

#include <cstdint>

#include "../../core/error.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace dsv32::cpu {

/// \brief Work (roughly, multiply-adds) below which a loop runs on the calling thread: waking a
///        thread team costs microseconds, and on a busy machine far more, so small loops — a
///        decode step's norms, a tiny model's layers — stay serial.
inline constexpr std::int64_t kParallelWorkThreshold = std::int64_t{1} << 18;

/// \brief The number of threads the CPU kernels use: OpenMP's (the machine's cores unless
///        OMP_NUM_THREADS or set_num_threads() says otherwise); 1 without OpenMP.
inline int num_threads() noexcept {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/// \brief The one knob for the CPU backend's thread count (what OMP_NUM_THREADS sets at start-up):
///        every later parallel loop uses `n` threads. Without OpenMP the count is checked, then
///        ignored (everything runs on the calling thread).
/// \param n threads, >= 1
/// \throws Error(invalid_argument) if n < 1.
inline void set_num_threads(int n) {
  DSV32_CHECK(n >= 1, invalid_argument, "cpu::set_num_threads: the thread count must be >= 1, got ", n);
#if defined(_OPENMP)
  omp_set_num_threads(n);
#endif
}

/// \brief Calls `f(i)` for every i in [0, n), spread over the OpenMP threads when the loop's total
///        work `n * work_per_item` is worth it. Iterations must be independent.
/// \param n             iterations
/// \param work_per_item estimated multiply-adds per iteration
/// \param f             the body, called as f(std::int64_t i)
template <class F>
void parallel_for(std::int64_t n, std::int64_t work_per_item, F&& f) {
#if defined(_OPENMP)
  if (n > 1 && n * work_per_item >= kParallelWorkThreshold && !omp_in_parallel()) {
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#else
  (void)work_per_item;
#endif
  for (std::int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace dsv32::cpu
