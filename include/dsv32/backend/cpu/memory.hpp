/// \file
/// \brief Host memory for the CPU backend.
#pragma once

#include <cstdlib>
#include <cstring>
#include <new>

#include "dsv32/backend/backend.hpp"

namespace dsv32 {

/// \addtogroup backend
/// @{

/// \brief CPU memory: 64-byte aligned host allocations; host copies are memcpy.
template <>
struct Memory<Cpu> {
  static constexpr std::size_t alignment = 64;  ///< bytes; a cache line and an AVX-512 vector

  /// Host memory can be borrowed directly (e.g. a memory-mapped checkpoint).
  static constexpr bool host_visible = true;

  /// \brief `bytes` (rounded up to the alignment) of uninitialized memory, or nullptr for 0 bytes.
  /// \throws std::bad_alloc when the allocation fails
  static void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    void* p = std::aligned_alloc(alignment, rounded);
    if (!p) throw std::bad_alloc();
    return p;
  }
  /// \brief Frees memory from allocate() (nullptr is a no-op).
  static void deallocate(void* p) noexcept { std::free(p); }
  /// \brief Sets `bytes` bytes at `p` to zero.
  static void zero(void* p, std::size_t bytes) { if (bytes) std::memset(p, 0, bytes); }
  /// \brief Copies `bytes` bytes from host memory `src` to backend memory `dst` (no overlap).
  static void copy_from_host(void* dst, const void* src, std::size_t bytes) { if (bytes) std::memcpy(dst, src, bytes); }
  /// \brief Copies `bytes` bytes from backend memory `src` to host memory `dst` (no overlap).
  static void copy_to_host(void* dst, const void* src, std::size_t bytes) { if (bytes) std::memcpy(dst, src, bytes); }
  /// \brief Copies `bytes` bytes within backend memory; the ranges may overlap.
  static void copy(void* dst, const void* src, std::size_t bytes) { if (bytes) std::memmove(dst, src, bytes); }
  /// Copies `rows` rows of `row_bytes` bytes between strided layouts (pitches in bytes).
  static void copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t rows,
                        std::size_t row_bytes) {
    for (std::size_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, row_bytes);
  }
};

/// @}

}  // namespace dsv32
