/// \file
/// \brief Host memory and the execution context of the CPU backend.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <string>
#include <cstdlib>
#include <cstring>
#include <new>

#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/cpu/kernel_options.hpp"

namespace dsv32 {

/// \addtogroup backend
/// @{

/// \brief The CPU backend's execution context: the model's kernel options and the count of host
///        synchronizations (Memory<Cpu>::synchronize()); work runs on the calling thread and its
///        OpenMP team.
template <>
struct ExecutionContext<Cpu> {
  /// \brief This model's kernel options: FP8 accumulation mode and ISA cap (cpu::KernelOptions),
  ///        read by every kernel call; set them before a forward pass, not during one.
  cpu::KernelOptions kernels;
  /// \brief Host synchronizations made through this context (for the CPU, points where a
  ///        device backend would have to wait; counted so that tests hold every backend to the same
  ///        budget per forward step).
  std::uint64_t synchronizations = 0;
};

/// \brief CPU memory: 64-byte aligned host allocations; copies are memcpy, "asynchronous" copies
///        complete at once, and synchronize() only counts.
///
/// Every backend's Memory<Backend> provides the members below with the same meaning (see docs/backends.md):
/// the memory space and whether the host can read it, counted allocation, zero-fill and copies (the
/// synchronous ones for loading and tests; forward() uses only the `_async` forms on its context and
/// synchronize()), and pinned host buffers for staged copies.
template <>
struct Memory<Cpu> {
  using space = Host;  ///< host memory: views of it are host views
  static constexpr std::size_t alignment = 64;  ///< bytes; a cache line and an AVX-512 vector

  /// Host memory: the host may read it, and host memory (a memory-mapped checkpoint) can be borrowed
  /// as backend memory directly.
  static constexpr bool host_visible = true;

  /// \brief `bytes` (rounded up to the alignment) of uninitialized memory, or nullptr for 0 bytes.
  ///        Counted by allocations().
  /// \throws std::bad_alloc when the allocation fails
  static void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    void* p = std::aligned_alloc(alignment, rounded);
    if (!p) throw std::bad_alloc();
    allocation_counter().fetch_add(1, std::memory_order_relaxed);
    return p;
  }
  /// \brief Frees memory from allocate() (nullptr is a no-op).
  static void deallocate(void* p) noexcept { std::free(p); }
  /// \brief How many allocate() calls returned memory so far, in this process (tests check that a
  ///        decode step allocates nothing).
  static std::uint64_t allocations() noexcept { return allocation_counter().load(std::memory_order_relaxed); }

  /// \brief Bytes of host memory available for new allocations: the kernel's MemAvailable estimate
  ///        (free memory plus what it can reclaim without swapping), else the free physical pages.
  ///        Models compare their memory plan with it before allocating caches and weights.
  static std::size_t available_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    std::size_t kb = 0;
    std::string unit;
    while (in >> key >> kb >> unit)
      if (key == "MemAvailable:") return kb * 1024;
    const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : SIZE_MAX;
  }

  /// \brief Host memory for staging copies (page-locked on device backends; plain memory here).
  static void* allocate_pinned(std::size_t bytes) { return allocate(bytes); }
  /// \brief Frees memory from allocate_pinned().
  static void deallocate_pinned(void* p) noexcept { deallocate(p); }

  /// \brief Sets `bytes` bytes at `p` to zero (synchronous).
  static void zero(void* p, std::size_t bytes) { if (bytes) std::memset(p, 0, bytes); }
  /// \brief Copies `bytes` bytes from host memory `src` to backend memory `dst` (synchronous).
  static void copy_from_host(void* dst, const void* src, std::size_t bytes) { if (bytes) std::memcpy(dst, src, bytes); }
  /// \brief Copies `bytes` bytes from backend memory `src` to host memory `dst` (synchronous).
  static void copy_to_host(void* dst, const void* src, std::size_t bytes) { if (bytes) std::memcpy(dst, src, bytes); }

  /// \brief Sets `bytes` bytes at `p` to zero, in order on `ctx`.
  static void zero_async(ExecutionContext<Cpu>& ctx, void* p, std::size_t bytes) { (void)ctx, zero(p, bytes); }
  /// \brief Copies within backend memory in order on `ctx`; the ranges may overlap.
  static void copy_async(ExecutionContext<Cpu>& ctx, void* dst, const void* src, std::size_t bytes) {
    (void)ctx;
    if (bytes) std::memmove(dst, src, bytes);
  }
  /// \brief Copies `rows` rows of `row_bytes` bytes between strided layouts of backend memory
  ///        (pitches in bytes), in order on `ctx`.
  static void copy_rows_async(ExecutionContext<Cpu>& ctx, void* dst, std::size_t dst_pitch, const void* src,
                              std::size_t src_pitch, std::size_t rows, std::size_t row_bytes) {
    (void)ctx;
    for (std::size_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, row_bytes);
  }
  /// \brief Copies `rows` rows of `row_bytes` bytes from strided backend memory to strided host memory
  ///        (pitches in bytes), in order on `ctx`; `dst` holds them after the next synchronize().
  static void copy_rows_to_host_async(ExecutionContext<Cpu>& ctx, void* dst, std::size_t dst_pitch, const void* src,
                                      std::size_t src_pitch, std::size_t rows, std::size_t row_bytes) {
    copy_rows_async(ctx, dst, dst_pitch, src, src_pitch, rows, row_bytes);
  }
  /// \brief Copies host memory to backend memory in order on `ctx`; `src` must stay valid and
  ///        unchanged until the next synchronize() (pinned memory on device backends).
  static void copy_from_host_async(ExecutionContext<Cpu>& ctx, void* dst, const void* src, std::size_t bytes) {
    (void)ctx, copy_from_host(dst, src, bytes);
  }
  /// \brief Copies backend memory to host memory in order on `ctx`; `dst` holds the data after the
  ///        next synchronize().
  static void copy_to_host_async(ExecutionContext<Cpu>& ctx, void* dst, const void* src, std::size_t bytes) {
    (void)ctx, copy_to_host(dst, src, bytes);
  }
  /// \brief Waits until everything enqueued on `ctx` is done, and counts the wait in
  ///        ctx.synchronizations.
  static void synchronize(ExecutionContext<Cpu>& ctx) noexcept { ++ctx.synchronizations; }

 private:
  static std::atomic<std::uint64_t>& allocation_counter() noexcept {
    static std::atomic<std::uint64_t> n{0};
    return n;
  }
};

/// @}

}  // namespace dsv32
