/// \file
/// \brief Device memory and the execution context of the CUDA backend: ExecutionContext<Cuda> (the
///        device, a stream, the cuBLASLt handle and workspace, the kernels' scratch and the cache of
///        cuBLASLt heuristics) and Memory<Cuda> (counted device allocations, pinned host buffers,
///        copies ordered on the context's stream).
///
/// Host header (CUDA runtime and cuBLASLt headers; no kernels): reached only through <dsv32/cuda.hpp>,
/// never from the host umbrella <dsv32/dsv32.hpp>. A host compiler compiles it too.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/cuda/check.hpp"
#include "dsv32/backend/cuda/handles.hpp"
#include "dsv32/backend/cuda/plan.hpp"

namespace dsv32 {

namespace cuda {

/// \addtogroup cuda
/// @{

/// \brief The memory space of CUDA device memory: views of it are not host views, so host code (an
///        observer, a CPU kernel) cannot be handed one without an explicit copy.
struct DeviceSpace {
  static constexpr const char* name = "cuda-device";  ///< the space's name in messages
};

/// \brief Whether this process sees at least one CUDA device (false without a driver, too). Never throws.
inline bool device_available() noexcept {
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

/// \brief A cuBLASLt matmul prepared for one GemmKey: its descriptors and the algorithm the heuristic
///        chose (or `has_algo == false` when the heuristic offered none, and the caller falls back).
struct CachedMatmul {
  LtMatmulDesc desc;                 ///< operation, transposes, scale modes
  LtMatrixLayout a;                  ///< A's layout
  LtMatrixLayout b;                  ///< B's layout
  LtMatrixLayout d;                  ///< D's layout (C = D)
  cublasLtMatmulAlgo_t algo{};       ///< the heuristic's first result
  std::size_t workspace = 0;         ///< workspace bytes the algorithm needs
  bool has_algo = false;             ///< whether the heuristic returned a result
  cublasStatus_t heuristic_status = CUBLAS_STATUS_SUCCESS;  ///< what the heuristic query returned
};

/// \brief Options of an ExecutionContext<Cuda>.
struct ContextOptions {
  int device = -1;                          ///< CUDA device ordinal; -1: the current device
  std::size_t workspace_bytes = 32u << 20;  ///< cuBLASLt workspace (32 MiB: what Hopper's kernels ask for)
  std::size_t scratch_bytes = 128u << 20;   ///< scratch of dsv32's kernels (staged GEMM operands, indexer scores)
  bool use_cublaslt = true;                 ///< false: every GEMM runs dsv32's reference kernel (tests, no cuBLASLt)
};

/// @}

}  // namespace cuda

/// \addtogroup backend
/// @{

/// \brief The CUDA backend's execution context: the device, one non-blocking stream every kernel and
///        copy of the model is ordered on, the cuBLASLt handle and workspace, dsv32's kernel scratch and
///        the cache of cuBLASLt heuristics (one per GEMM shape, layout and alignment).
///
/// Everything is allocated when the context is made (a Transformer makes its own), so that forward()
/// allocates nothing. Move-only; the resources are released in reverse order of creation.
/// \throws Error(unsupported) from the constructor when no CUDA device is present
template <>
struct ExecutionContext<Cuda> {
  /// \brief Host synchronizations made through this context (Memory<Cuda>::synchronize()).
  std::uint64_t synchronizations = 0;

  /// \brief A context on the current device with the default options.
  ExecutionContext() : ExecutionContext(cuda::ContextOptions{}) {}
  /// \brief A context with `options` (device, workspace and scratch sizes).
  explicit ExecutionContext(const cuda::ContextOptions& options) : options_(options) {
    int count = 0;
    DSV32_CUDA_CHECK(cudaGetDeviceCount(&count));
    DSV32_CHECK(count > 0, unsupported, "CUDA backend: no CUDA device present");
    if (options.device >= 0) DSV32_CUDA_CHECK(cudaSetDevice(options.device));
    DSV32_CUDA_CHECK(cudaGetDevice(&device_));
    int smem = 0, sms = 0, major = 0, minor = 0;
    DSV32_CUDA_CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_));
    DSV32_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_));
    DSV32_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
    DSV32_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_));
    smem_optin_ = static_cast<std::size_t>(smem);
    multiprocessors_ = sms;
    compute_capability_ = major * 10 + minor;
    stream_ = cuda::make_stream();
    lt_ = cuda::make_cublaslt();
    workspace_ = cuda::DeviceBuffer(options.workspace_bytes);
    scratch_ = cuda::DeviceBuffer(options.scratch_bytes);
    gemms_ = std::make_unique<GemmCache>();
  }
  ExecutionContext(const ExecutionContext&) = delete;
  ExecutionContext& operator=(const ExecutionContext&) = delete;
  ExecutionContext(ExecutionContext&&) noexcept = default;             ///< takes over the resources
  ExecutionContext& operator=(ExecutionContext&&) noexcept = default;  ///< takes over the resources

  /// \brief The stream every operation of this context is ordered on.
  cudaStream_t stream() const noexcept { return stream_.get(); }
  /// \brief The cuBLASLt handle.
  cublasLtHandle_t cublaslt() const noexcept { return lt_.get(); }
  /// \brief The cuBLASLt workspace ([workspace_bytes()] bytes of device memory).
  void* workspace() const noexcept { return workspace_.data(); }
  /// \brief Size of the cuBLASLt workspace.
  std::size_t workspace_bytes() const noexcept { return workspace_.bytes(); }
  /// \brief The kernels' scratch (device memory, 256-byte aligned): only ever used between two kernels
  ///        of one Kernels<Cuda> call, all ordered on stream(), so calls may reuse it freely.
  void* scratch() const noexcept { return scratch_.data(); }
  /// \brief Size of the scratch.
  std::size_t scratch_bytes() const noexcept { return scratch_.bytes(); }
  /// \brief The device ordinal.
  int device() const noexcept { return device_; }
  /// \brief Largest dynamic shared memory a block may opt into.
  std::size_t smem_optin() const noexcept { return smem_optin_; }
  /// \brief Multiprocessors of the device.
  int multiprocessors() const noexcept { return multiprocessors_; }
  /// \brief Compute capability as major * 10 + minor (90 for Hopper).
  int compute_capability() const noexcept { return compute_capability_; }
  /// \brief The options the context was made with.
  const cuda::ContextOptions& options() const noexcept { return options_; }
  /// \brief Whether GEMMs go through cuBLASLt (else dsv32's reference kernel).
  bool use_cublaslt() const noexcept { return options_.use_cublaslt; }
  /// \brief The prepared cuBLASLt matmul of `key`, or nullptr when not prepared yet.
  cuda::CachedMatmul* find_matmul(const cuda::GemmKey& key) {
    const auto it = gemms_->find(key);
    return it == gemms_->end() ? nullptr : &it->second;
  }
  /// \brief Stores the prepared matmul of `key`; returns it.
  cuda::CachedMatmul& store_matmul(const cuda::GemmKey& key, cuda::CachedMatmul m) {
    return gemms_->insert_or_assign(key, std::move(m)).first->second;
  }
  /// \brief How many GEMM shapes have a prepared matmul (each heuristic query runs once per shape).
  std::size_t cached_matmuls() const noexcept { return gemms_ ? gemms_->size() : 0; }
  /// \brief Counts a product that ran dsv32's reference GEMM because cuBLASLt offered no algorithm.
  void note_gemm_fallback() noexcept { ++gemm_fallbacks_; }
  /// \brief Products (chunks) that ran dsv32's reference GEMM because cuBLASLt offered no algorithm
  ///        (tests and the device check report it: a shape that should run on cuBLASLt and does not).
  std::uint64_t gemm_fallbacks() const noexcept { return gemm_fallbacks_; }

 private:
  using GemmCache = std::unordered_map<cuda::GemmKey, cuda::CachedMatmul, cuda::GemmKeyHash>;
  cuda::ContextOptions options_;
  int device_ = 0;
  std::size_t smem_optin_ = 48u << 10;
  int multiprocessors_ = 0;
  int compute_capability_ = 0;
  std::uint64_t gemm_fallbacks_ = 0;
  // declared in order of creation: destroyed in reverse (the cached descriptors before the handle)
  cuda::Stream stream_;
  cuda::LtHandle lt_;
  cuda::DeviceBuffer workspace_;
  cuda::DeviceBuffer scratch_;
  std::unique_ptr<GemmCache> gemms_;
};

/// \brief CUDA device memory: counted cudaMalloc allocations, page-locked host buffers for staged
///        copies, and copies ordered on the context's stream.
///
/// Allocations are synchronous cudaMalloc rather than cudaMallocAsync: they are made once, when a model
/// reserves its weights, caches and scratch (forward() allocates nothing), and live as long as the
/// model, so a stream-ordered pool would buy nothing and tie the memory to one stream.
template <>
struct Memory<Cuda> {
  using space = cuda::DeviceSpace;      ///< device memory: views of it are not host views
  using Context = ExecutionContext<Cuda>;  ///< the context copies are ordered on
  static constexpr bool host_visible = false;  ///< the host cannot read device memory
  static constexpr std::size_t alignment = 256;  ///< bytes (cudaMalloc's guarantee)

  /// \brief `bytes` of uninitialized device memory on the current device, or nullptr for 0 bytes.
  /// \throws Error naming cudaMalloc and the CUDA error when it fails
  static void* allocate(std::size_t bytes) { return cuda::device_allocate(bytes); }
  /// \brief Frees memory from allocate() (nullptr is a no-op).
  static void deallocate(void* p) noexcept { cuda::device_free(p); }
  /// \brief How many device allocations were made so far in this process (contexts' included).
  static std::uint64_t allocations() noexcept { return cuda::DeviceAllocations::instance().count(); }
  /// \brief Device bytes allocated through allocate() and not yet freed.
  static std::uint64_t live_bytes() { return cuda::DeviceAllocations::instance().live(); }
  /// \brief Free device memory on the current device (cudaMemGetInfo).
  static std::size_t available_bytes() {
    std::size_t free_bytes = 0, total = 0;
    DSV32_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return free_bytes;
  }

  /// \brief `bytes` of page-locked host memory (cudaMallocHost), which asynchronous copies need.
  static void* allocate_pinned(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    DSV32_CUDA_CHECK(cudaMallocHost(&p, bytes));
    return p;
  }
  /// \brief Frees memory from allocate_pinned().
  static void deallocate_pinned(void* p) noexcept {
    if (p) (void)cudaFreeHost(p);
  }

  /// \brief Sets `bytes` bytes at `p` to zero (synchronous).
  static void zero(void* p, std::size_t bytes) {
    if (bytes) DSV32_CUDA_CHECK(cudaMemset(p, 0, bytes));
  }
  /// \brief Copies host memory to device memory (synchronous).
  static void copy_from_host(void* dst, const void* src, std::size_t bytes) {
    if (bytes) DSV32_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  }
  /// \brief Copies device memory to host memory (synchronous).
  static void copy_to_host(void* dst, const void* src, std::size_t bytes) {
    if (bytes) DSV32_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  }

  /// \brief Sets `bytes` bytes at `p` to zero, in order on `ctx`.
  static void zero_async(Context& ctx, void* p, std::size_t bytes) {
    if (bytes) DSV32_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ctx.stream()));
  }
  /// \brief Copies within device memory in order on `ctx`; the ranges may overlap (cudaMemcpyAsync
  ///        does not promise memmove semantics, so an overlapping copy goes through the scratch).
  static void copy_async(Context& ctx, void* dst, const void* src, std::size_t bytes) {
    if (!bytes || dst == src) return;
    const auto d = reinterpret_cast<std::uintptr_t>(dst), s = reinterpret_cast<std::uintptr_t>(src);
    const bool overlap = d < s + bytes && s < d + bytes;
    if (overlap && bytes <= ctx.scratch_bytes()) {
      DSV32_CUDA_CHECK(cudaMemcpyAsync(ctx.scratch(), src, bytes, cudaMemcpyDeviceToDevice, ctx.stream()));
      DSV32_CUDA_CHECK(cudaMemcpyAsync(dst, ctx.scratch(), bytes, cudaMemcpyDeviceToDevice, ctx.stream()));
      return;
    }
    DSV32_CHECK(!overlap, unsupported, "CUDA copy_async: overlapping copy of ", bytes,
                " bytes exceeds the context's scratch (", ctx.scratch_bytes(), " bytes)");
    DSV32_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx.stream()));
  }
  /// \brief Copies `rows` rows of `row_bytes` bytes between strided device layouts (pitches in
  ///        bytes), in order on `ctx`.
  static void copy_rows_async(Context& ctx, void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                              std::size_t rows, std::size_t row_bytes) {
    if (rows && row_bytes)
      DSV32_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice,
                                         ctx.stream()));
  }
  /// \brief Copies `rows` rows of `row_bytes` bytes from strided device memory to strided host memory,
  ///        in order on `ctx`; `dst` holds them after the next synchronize().
  static void copy_rows_to_host_async(Context& ctx, void* dst, std::size_t dst_pitch, const void* src,
                                      std::size_t src_pitch, std::size_t rows, std::size_t row_bytes) {
    if (rows && row_bytes)
      DSV32_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToHost,
                                         ctx.stream()));
  }
  /// \brief Copies host memory to device memory in order on `ctx`; `src` must stay valid and unchanged
  ///        until the next synchronize() (pinned memory copies asynchronously, pageable memory is staged
  ///        by the driver).
  static void copy_from_host_async(Context& ctx, void* dst, const void* src, std::size_t bytes) {
    if (bytes) DSV32_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx.stream()));
  }
  /// \brief Copies device memory to host memory in order on `ctx`; `dst` holds the data after the next
  ///        synchronize().
  static void copy_to_host_async(Context& ctx, void* dst, const void* src, std::size_t bytes) {
    if (bytes) DSV32_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx.stream()));
  }
  /// \brief Waits for everything ordered on `ctx` (cudaStreamSynchronize) and counts the wait.
  /// \throws Error naming the call and the CUDA error when an earlier kernel of the stream failed
  static void synchronize(Context& ctx) {
    ++ctx.synchronizations;
    DSV32_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
  }
};

/// @}

}  // namespace dsv32
