/// \file
/// \brief Loop parallelism of the CPU backend (OpenMP when the build enables it, serial otherwise).
#pragma once

#include <cstdint>

#include "../../core/error.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif
#if defined(__SSE__) || defined(_M_X64)
#include <xmmintrin.h>
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

/// \brief Gives its scope IEEE subnormals on x86: clears MXCSR's denormals-are-zero and
///        flush-to-zero bits if the thread has them set (programs built with -ffast-math set both at
///        start-up) and restores them at the end of the scope. The kernels widen E4M3's subnormal
///        codes through subnormal floats and the reference's sums keep tiny values, so with those bits
///        set results would change; every CPU kernel entry and every parallel_for thread holds one.
///        Costs one MXCSR read where the bits are clear (the usual case).
class IeeeSubnormalScope {
 public:
  IeeeSubnormalScope() noexcept {
#if defined(__SSE__) || defined(_M_X64)
    saved_ = _mm_getcsr();
    if ((saved_ & kBits) != 0) _mm_setcsr(saved_ & ~kBits);
#endif
  }
  ~IeeeSubnormalScope() {
#if defined(__SSE__) || defined(_M_X64)
    if ((saved_ & kBits) != 0) _mm_setcsr(saved_);
#endif
  }
  IeeeSubnormalScope(const IeeeSubnormalScope&) = delete;
  IeeeSubnormalScope& operator=(const IeeeSubnormalScope&) = delete;

  /// MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6).
  static constexpr unsigned kBits = 0x8040u;

 private:
  [[maybe_unused]] unsigned saved_ = 0;
};

/// \brief Calls `f(i)` for every i in [0, n), spread over the OpenMP threads when the loop's total
///        work `n * work_per_item` is worth it, each thread with IEEE subnormals
///        (IeeeSubnormalScope). Iterations must be independent.
/// \param n             iterations
/// \param work_per_item estimated multiply-adds per iteration
/// \param f             the body, called as f(std::int64_t i)
template <class F>
void parallel_for(std::int64_t n, std::int64_t work_per_item, F&& f) {
#if defined(_OPENMP)
  if (n > 1 && n * work_per_item >= kParallelWorkThreshold && !omp_in_parallel()) {
#pragma omp parallel
    {
      const IeeeSubnormalScope ieee;
#pragma omp for schedule(dynamic, 1) nowait  // the region's end is the one barrier
      for (std::int64_t i = 0; i < n; ++i) f(i);
    }
    return;
  }
#else
  (void)work_per_item;
#endif
  const IeeeSubnormalScope ieee;
  for (std::int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace dsv32::cpu
