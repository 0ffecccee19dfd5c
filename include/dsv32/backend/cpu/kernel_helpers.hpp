/// \file
/// \brief CPU: small helpers the product drivers (gemm.hpp) and the attention kernels (attention.hpp)
///        both use — per-thread scratch, cache hints, the side-by-side layout of x rows, the check of
///        a weight's dtype — kept apart from either so that neither reaches into the other's internals.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dsv32/backend/kernel_args.hpp"
#include "dsv32/core/dtype.hpp"
#include "dsv32/core/error.hpp"

namespace dsv32::cpu::detail {

/// Refuses a weight dtype the products cannot read, before any parallel loop: an exception thrown
/// inside an OpenMP region would terminate the program instead of reaching the caller.
inline void check_weight_dtype(const WeightView<>& w, const char* op) {
  DSV32_CHECK(w.dtype == DType::BF16 || w.dtype == DType::F32 || w.dtype == DType::F8_E4M3, unsupported, op,
              ": weight dtype ", dtype_name(w.dtype), " in a matrix product (BF16, F32 or F8_E4M3 expected)");
}

/// Per-thread scratch arrays, grown on demand and reused across calls: array `slot` (< 10) of the
/// owner `Tag` (the GEMM drivers, the attention kernels: their slots never collide). Each starts on a
/// 64-byte line, so that the kernels' vector loads of it never straddle two lines.
template <class T, class Tag>
T* thread_scratch(int slot, std::size_t n) {
  constexpr std::size_t kLine = 64, kPad = kLine / sizeof(T);
  thread_local std::vector<T> buffers[10];
  auto& b = buffers[slot];
  if (b.size() < n + kPad) b.resize(n + kPad);
  const auto addr = reinterpret_cast<std::uintptr_t>(b.data());
  return b.data() + ((kLine - addr % kLine) % kLine) / sizeof(T);
}

/// Asks the cache for the `bytes` bytes from p (one hint per 64-byte line): for reads the hardware
/// prefetcher cannot foresee (rows far apart, scattered positions).
inline void prefetch_bytes(const void* p, std::int64_t bytes) {
  for (std::int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(static_cast<const char*>(p) + b);
}

/// The T rows' values value(t, i), i < n, side by side: out[i T + t] (the layout of the kernels that
/// broadcast x from memory, all T rows of a column a small offset from one pointer).
template <class Value, class Out>
void side_by_side(std::int64_t T, std::int64_t n, Value&& value, Out* out) {
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t i = 0; i < n; ++i) out[i * T + t] = value(t, i);
}

}  // namespace dsv32::cpu::detail
