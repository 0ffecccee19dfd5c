/// \file
/// \brief RAII owners of the CUDA backend's resources — device memory (counted), streams, events, the
///        cuBLASLt handle and cuBLASLt descriptors — so that every one is released exactly once, also
///        when an error unwinds a half-built context or plan.
///
/// Host header (CUDA runtime and cuBLASLt headers): reached only through <dsv32/cuda.hpp>.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "dsv32/backend/cuda/check.hpp"

namespace dsv32::cuda {

/// \addtogroup cuda
/// @{

/// \brief Device memory accounting: every cudaMalloc of the backend goes through device_allocate(), so
///        that Memory<Cuda>::allocations() counts them all (model weights, caches, scratch, workspaces)
///        and live_bytes() says how much is held.
class DeviceAllocations {
 public:
  /// \brief The process-wide accounting.
  static DeviceAllocations& instance() {
    static DeviceAllocations a;
    return a;
  }
  /// \brief Records an allocation of `bytes` at `p`.
  void add(void* p, std::size_t bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
    sizes_[p] = bytes;
    live_ += bytes;
    count_.fetch_add(1, std::memory_order_relaxed);
  }
  /// \brief Forgets the allocation at `p`.
  void remove(void* p) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    live_ -= it->second;
    sizes_.erase(it);
  }
  /// \brief Allocations made so far.
  std::uint64_t count() const noexcept { return count_.load(std::memory_order_relaxed); }
  /// \brief Bytes allocated and not yet freed.
  std::uint64_t live() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return live_;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<void*, std::size_t> sizes_;
  std::uint64_t live_ = 0;
  std::atomic<std::uint64_t> count_{0};
};

/// \brief `bytes` of device memory on the current device (cudaMalloc, 256-byte aligned), counted;
///        nullptr for 0 bytes.
/// \throws Error naming cudaMalloc, the size and the CUDA error when the allocation fails
inline void* device_allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, bytes);
  if (status != cudaSuccess)
    check_cuda(status, ::dsv32::detail::concat("cudaMalloc(", bytes, " bytes)").c_str(), __FILE__, __LINE__);
  DeviceAllocations::instance().add(p, bytes);
  return p;
}

/// \brief Frees memory from device_allocate() (nullptr is a no-op). Errors cannot be thrown from the
///        destructors that call this; a failing cudaFree (only possible after an earlier sticky error,
///        or at process exit once the runtime is unloading) is ignored.
inline void device_free(void* p) noexcept {
  if (!p) return;
  DeviceAllocations::instance().remove(p);
  (void)cudaFree(p);
}

/// \brief An owned device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// \brief Allocates `bytes` (uninitialized).
  explicit DeviceBuffer(std::size_t bytes) : data_(device_allocate(bytes)), bytes_(bytes) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  /// \brief Takes over `o`'s memory.
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  /// \brief Frees this buffer's memory, then takes over `o`'s.
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      device_free(data_);
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { device_free(data_); }
  /// \brief The device address (null when empty).
  void* data() const noexcept { return data_; }
  /// \brief Its size in bytes.
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// \brief An owned handle released by `Destroy` (a function object taking the handle).
/// \tparam H the handle type (a pointer type) \tparam Destroy its release
template <class H, class Destroy>
class UniqueHandle {
 public:
  UniqueHandle() = default;
  /// \brief Owns `h`.
  explicit UniqueHandle(H h) noexcept : h_(h) {}
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;
  /// \brief Takes over `o`'s handle.
  UniqueHandle(UniqueHandle&& o) noexcept : h_(std::exchange(o.h_, H{})) {}
  /// \brief Releases this handle, then takes over `o`'s.
  UniqueHandle& operator=(UniqueHandle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, H{});
    }
    return *this;
  }
  ~UniqueHandle() { reset(); }
  /// \brief The handle.
  H get() const noexcept { return h_; }
  /// \brief Releases the handle (its release's status is ignored: destructors cannot throw).
  void reset() noexcept {
    if (h_) Destroy{}(h_);
    h_ = H{};
  }

 private:
  H h_{};
};

namespace detail {
struct StreamDestroy {
  void operator()(cudaStream_t s) const noexcept { (void)cudaStreamDestroy(s); }
};
struct EventDestroy {
  void operator()(cudaEvent_t e) const noexcept { (void)cudaEventDestroy(e); }
};
struct LtDestroy {
  void operator()(cublasLtHandle_t h) const noexcept { (void)cublasLtDestroy(h); }
};
struct LtDescDestroy {
  void operator()(cublasLtMatmulDesc_t d) const noexcept { (void)cublasLtMatmulDescDestroy(d); }
};
struct LtLayoutDestroy {
  void operator()(cublasLtMatrixLayout_t l) const noexcept { (void)cublasLtMatrixLayoutDestroy(l); }
};
struct LtPreferenceDestroy {
  void operator()(cublasLtMatmulPreference_t p) const noexcept { (void)cublasLtMatmulPreferenceDestroy(p); }
};
}  // namespace detail

/// \brief An owned CUDA stream.
using Stream = UniqueHandle<cudaStream_t, detail::StreamDestroy>;
/// \brief An owned CUDA event.
using Event = UniqueHandle<cudaEvent_t, detail::EventDestroy>;
/// \brief An owned cuBLASLt handle.
using LtHandle = UniqueHandle<cublasLtHandle_t, detail::LtDestroy>;
/// \brief An owned cuBLASLt matmul descriptor.
using LtMatmulDesc = UniqueHandle<cublasLtMatmulDesc_t, detail::LtDescDestroy>;
/// \brief An owned cuBLASLt matrix layout.
using LtMatrixLayout = UniqueHandle<cublasLtMatrixLayout_t, detail::LtLayoutDestroy>;
/// \brief An owned cuBLASLt matmul preference.
using LtPreference = UniqueHandle<cublasLtMatmulPreference_t, detail::LtPreferenceDestroy>;

/// \brief A new non-blocking stream on the current device (it does not wait for the legacy default stream).
inline Stream make_stream() {
  cudaStream_t s = nullptr;
  DSV32_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}

/// \brief A new event (with timing, for benchmarks).
inline Event make_event() {
  cudaEvent_t e = nullptr;
  DSV32_CUDA_CHECK(cudaEventCreate(&e));
  return Event(e);
}

/// \brief A new cuBLASLt handle.
inline LtHandle make_cublaslt() {
  cublasLtHandle_t h = nullptr;
  DSV32_CUBLAS_CHECK(cublasLtCreate(&h));
  return LtHandle(h);
}

/// @}

}  // namespace dsv32::cuda
