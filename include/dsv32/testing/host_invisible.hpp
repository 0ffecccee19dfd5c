/// \file
/// \brief testing::HostInvisible: a backend whose memory the host cannot read, for proving that layers
///        (and backends' seams) never touch backend memory from the host.
///
/// It behaves like a device backend without a device: its memory is its own memory space (views of it
/// do not convert to host views), Memory<HostInvisible>::host_visible is false, and every pointer it
/// hands out is *tagged*: the allocation's real address with bits 48-55 set to 0xA5, which no process
/// maps (a non-canonical address on x86-64; a translation fault on AArch64). Dereferencing one on the
/// host crashes at once instead of reading plausible numbers. Its kernels check and untag each pointer
/// and run the CPU backend's code behind the seam, so results equal the Cpu backend's bit for bit; its
/// copies, zero-fills and synchronizations count like a device's.
///
/// Backend authors use it to check their layers; dsv32's own tests replay the golden scenarios, the
/// golden generations, both checkpoint layouts and threaded model parallelism on it:
/// \code
/// auto report = dsv32::testing::replay_golden<MyConfig, dsv32::testing::HostInvisible>("golden/tiny_bf16");
/// \endcode
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/cpu/kernels.hpp"
#include "dsv32/backend/cpu/memory.hpp"
#include "dsv32/backend/kernel_args.hpp"
#include "dsv32/backend/kernels_contract.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/core/tensor.hpp"

namespace dsv32::testing {

/// \addtogroup testing
/// @{

/// \brief The host-invisible test backend's tag.
struct HostInvisible {
  static constexpr const char* name = "host-invisible";  ///< the backend's name in messages
};

/// \brief The memory space of HostInvisible: memory the host cannot read.
struct HostInvisibleSpace {
  static constexpr const char* name = "host-invisible";  ///< the space's name in messages
};

/// \brief The tag in HostInvisible pointers: 0xA5 in bits 48-55.
inline constexpr std::uintptr_t kHostInvisibleTag = std::uintptr_t{0xA5} << 48;
/// \brief The bits the tag occupies.
inline constexpr std::uintptr_t kHostInvisibleTagMask = std::uintptr_t{0xFF} << 48;

/// \brief The host address behind a HostInvisible pointer (nullptr stays nullptr).
/// \throws Error(invalid_argument) for a non-null pointer that HostInvisible did not hand out (host
///         memory passed where backend memory is expected)
template <class T>
T* untag(T* p) {
  if (p == nullptr) return nullptr;
  const auto bits = reinterpret_cast<std::uintptr_t>(p);
  DSV32_CHECK((bits & kHostInvisibleTagMask) == kHostInvisibleTag, invalid_argument, "HostInvisible: pointer ",
              static_cast<const void*>(p), " is not HostInvisible memory (host memory passed to a backend kernel or copy)");
  return reinterpret_cast<T*>(bits - kHostInvisibleTag);
}

/// \brief The HostInvisible pointer of a host address.
template <class T>
T* tag(T* p) noexcept {
  return p == nullptr ? nullptr : reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(p) + kHostInvisibleTag);
}

/// @}

}  // namespace dsv32::testing

namespace dsv32 {

/// \addtogroup testing
/// @{

/// \brief HostInvisible's execution context: a synchronization counter, and the CPU context its
///        kernels run in.
template <>
struct ExecutionContext<testing::HostInvisible> {
  std::uint64_t synchronizations = 0;  ///< Memory<HostInvisible>::synchronize() calls on this context
  ExecutionContext<Cpu> cpu;           ///< where the CPU code behind the seam runs
};

/// \brief HostInvisible's memory: host allocations handed out as tagged pointers; every copy untags.
template <>
struct Memory<testing::HostInvisible> {
  using space = testing::HostInvisibleSpace;  ///< its own space: views of it are not host views
  using Context = ExecutionContext<testing::HostInvisible>;  ///< the context copies are ordered on
  static constexpr bool host_visible = false;  ///< the host cannot read it (no borrowing of host memory)
  static constexpr std::size_t alignment = 64;  ///< bytes

  /// \brief `bytes` bytes of uninitialized memory, as a tagged pointer; counted by allocations() and
  ///        live_bytes().
  static void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    // one alignment-sized header in front holds the size, for live_bytes()
    auto* p = static_cast<std::byte*>(std::aligned_alloc(alignment, alignment + (bytes + alignment - 1) / alignment * alignment));
    if (!p) throw std::bad_alloc();
    std::memcpy(p, &bytes, sizeof bytes);
    counter().fetch_add(1, std::memory_order_relaxed);
    live().fetch_add(bytes, std::memory_order_relaxed);
    return testing::tag(p + alignment);
  }
  /// \brief Frees memory from allocate().
  static void deallocate(void* p) noexcept {
    if (!p) return;
    auto* real = reinterpret_cast<std::byte*>(reinterpret_cast<std::uintptr_t>(p) - testing::kHostInvisibleTag) - alignment;
    std::size_t bytes = 0;
    std::memcpy(&bytes, real, sizeof bytes);
    live().fetch_sub(bytes, std::memory_order_relaxed);
    std::free(real);
  }
  /// \brief How many allocate() calls returned memory so far, in this process.
  static std::uint64_t allocations() noexcept { return counter().load(std::memory_order_relaxed); }
  /// \brief Bytes allocated and not yet freed, in this process (the backend's "device memory" in use).
  static std::uint64_t live_bytes() noexcept { return live().load(std::memory_order_relaxed); }
  /// \brief Bytes available for new allocations (host memory: Memory<Cpu>::available_bytes()).
  static std::size_t available_bytes() { return Memory<Cpu>::available_bytes(); }
  /// \brief Host memory for staged copies (plain host memory, not tagged).
  static void* allocate_pinned(std::size_t bytes) { return Memory<Cpu>::allocate(bytes); }
  /// \brief Frees memory from allocate_pinned().
  static void deallocate_pinned(void* p) noexcept { Memory<Cpu>::deallocate(p); }

  /// \brief Sets `bytes` bytes of backend memory to zero (synchronous).
  static void zero(void* p, std::size_t bytes) { if (bytes) std::memset(testing::untag(p), 0, bytes); }
  /// \brief Host -> backend (synchronous).
  static void copy_from_host(void* dst, const void* src, std::size_t bytes) {
    if (bytes) std::memcpy(testing::untag(dst), src, bytes);
  }
  /// \brief Backend -> host (synchronous).
  static void copy_to_host(void* dst, const void* src, std::size_t bytes) {
    if (bytes) std::memcpy(dst, testing::untag(src), bytes);
  }
  /// \brief zero(), ordered on `ctx`.
  static void zero_async(Context& ctx, void* p, std::size_t bytes) { (void)ctx, zero(p, bytes); }
  /// \brief Backend -> backend, ordered on `ctx`; the ranges may overlap.
  static void copy_async(Context& ctx, void* dst, const void* src, std::size_t bytes) {
    (void)ctx;
    if (bytes) std::memmove(testing::untag(dst), testing::untag(src), bytes);
  }
  /// \brief Strided backend -> backend rows, ordered on `ctx`.
  static void copy_rows_async(Context& ctx, void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                              std::size_t rows, std::size_t row_bytes) {
    if (rows) Memory<Cpu>::copy_rows_async(ctx.cpu, testing::untag(dst), dst_pitch, testing::untag(src), src_pitch, rows, row_bytes);
  }
  /// \brief Strided backend -> host rows, ordered on `ctx`.
  static void copy_rows_to_host_async(Context& ctx, void* dst, std::size_t dst_pitch, const void* src,
                                      std::size_t src_pitch, std::size_t rows, std::size_t row_bytes) {
    if (rows) Memory<Cpu>::copy_rows_async(ctx.cpu, dst, dst_pitch, testing::untag(src), src_pitch, rows, row_bytes);
  }
  /// \brief Host -> backend, ordered on `ctx`.
  static void copy_from_host_async(Context& ctx, void* dst, const void* src, std::size_t bytes) {
    (void)ctx, copy_from_host(dst, src, bytes);
  }
  /// \brief Backend -> host, ordered on `ctx`.
  static void copy_to_host_async(Context& ctx, void* dst, const void* src, std::size_t bytes) {
    (void)ctx, copy_to_host(dst, src, bytes);
  }
  /// \brief Waits for `ctx` (a no-op here) and counts it.
  static void synchronize(Context& ctx) noexcept { ++ctx.synchronizations; }

 private:
  static std::atomic<std::uint64_t>& counter() noexcept {
    static std::atomic<std::uint64_t> n{0};
    return n;
  }
  static std::atomic<std::uint64_t>& live() noexcept {
    static std::atomic<std::uint64_t> n{0};
    return n;
  }
};

/// \brief HostInvisible's kernels: each checks and untags its views and runs Kernels<Cpu>.
template <>
struct Kernels<testing::HostInvisible> {
  using Context = ExecutionContext<testing::HostInvisible>;  ///< the context every call takes
  using Space = testing::HostInvisibleSpace;                ///< the memory space of every view
  /// \brief A matrix view of the backend's memory.
  template <class T>
  using Mat = MatrixView<T, Space>;
  /// \brief An array view of the backend's memory.
  template <class T>
  using Vec = VectorView<T, Space>;
  using Weight = WeightView<Space>;  ///< a weight of the backend's memory
  using K = Kernels<Cpu>;            ///< the code behind the seam
  /// \brief Like the CPU backend whose code it runs, the MoE reads the plan's offsets back once per
  ///        layer and runs each expert on its rows (runs_grouped_experts is false), so its replays check
  ///        that path, bit for bit the CPU's, with that one read as the only host read of the layer.
  static constexpr bool grouped_experts = false;

  /// \brief The host view behind a backend matrix view.
  template <class T>
  static MatrixView<T> host(Mat<T> m) { return {testing::untag(m.data), m.rows, m.cols, m.stride}; }
  /// \brief The host view behind a backend array view.
  template <class T>
  static VectorView<T> host(Vec<T> v) { return {testing::untag(v.data), v.size}; }
  /// \brief The host views behind a pass's paged-cache arrays.
  static CachePages<Host> host(const CachePages<Space>& p) {
    return {host(p.block_table), host(p.sequence), host(p.position), p.page_size, p.max_visible};
  }
  /// \brief The host view behind a backend weight.
  static WeightView<> host(const Weight& w) {
    return WeightView<>{w.dtype, testing::untag(w.data), w.out, w.in, testing::untag(w.scale)};
  }

  /// \copydoc Kernels<Cpu>::embedding
  static void embedding(Context& ctx, Vec<const std::int32_t> tokens, Mat<const bf16> table, std::int64_t first_id,
                        Mat<bf16> out) {
    K::embedding(ctx.cpu, host(tokens), host(table), first_id, host(out));
  }
  /// \copydoc Kernels<Cpu>::rms_norm
  static void rms_norm(Context& ctx, Mat<const bf16> x, Vec<const float> w, float eps, Mat<bf16> y) {
    K::rms_norm(ctx.cpu, host(x), host(w), eps, host(y));
  }
  /// \copydoc Kernels<Cpu>::rms_norm_residual
  static void rms_norm_residual(Context& ctx, Mat<const bf16> x, Mat<bf16> residual, Vec<const float> w, float eps,
                                Mat<bf16> y) {
    K::rms_norm_residual(ctx.cpu, host(x), host(residual), host(w), eps, host(y));
  }
  /// \copydoc Kernels<Cpu>::layer_norm
  static void layer_norm(Context& ctx, Mat<const bf16> x, Vec<const float> w, Vec<const float> b, float eps,
                         Mat<bf16> y) {
    K::layer_norm(ctx.cpu, host(x), host(w), host(b), eps, host(y));
  }
  /// \copydoc Kernels<Cpu>::linear
  static void linear(Context& ctx, Mat<const bf16> x, const Weight& w, ScaleFmt fmt, Mat<bf16> y) {
    K::linear(ctx.cpu, host(x), host(w), fmt, host(y));
  }
  /// \copydoc Kernels<Cpu>::linear_f32
  static void linear_f32(Context& ctx, Mat<const bf16> x, const Weight& w, Mat<float> y) {
    K::linear_f32(ctx.cpu, host(x), host(w), host(y));
  }
  /// \copydoc Kernels<Cpu>::act_quant
  static void act_quant(Context& ctx, Mat<const bf16> x, ScaleFmt fmt, Mat<std::uint8_t> codes, Mat<float> s) {
    K::act_quant(ctx.cpu, host(x), fmt, host(codes), host(s));
  }
  /// \copydoc Kernels<Cpu>::rope
  static void rope(Context& ctx, Mat<bf16> x, std::int64_t heads, Vec<const std::int32_t> positions,
                   Mat<const float> cos, Mat<const float> sin, bool interleaved) {
    K::rope(ctx.cpu, host(x), heads, host(positions), host(cos), host(sin), interleaved);
  }
  /// \copydoc Kernels<Cpu>::hadamard
  static void hadamard(Context& ctx, Mat<bf16> x) { K::hadamard(ctx.cpu, host(x)); }
  /// \copydoc Kernels<Cpu>::silu_mul
  static void silu_mul(Context& ctx, Mat<const bf16> a, Mat<const bf16> b, Mat<bf16> out) {
    K::silu_mul(ctx.cpu, host(a), host(b), host(out));
  }
  /// \copydoc Kernels<Cpu>::indexer_topk
  static void indexer_topk(Context& ctx, Mat<const std::uint8_t> q_codes, Mat<const float> q_scale,
                           Mat<const bf16> head_weights, float head_scale, float dim_scale,
                           Mat<const std::uint8_t> k_codes, Mat<const float> k_scale, const CachePages<Space>& pages,
                           Mat<std::int32_t> selected, Vec<std::int32_t> count) {
    K::indexer_topk(ctx.cpu, host(q_codes), host(q_scale), host(head_weights), head_scale, dim_scale, host(k_codes),
                    host(k_scale), host(pages), host(selected), host(count));
  }
  /// \copydoc Kernels<Cpu>::sparse_attention
  static void sparse_attention(Context& ctx, Mat<const bf16> q, Mat<const bf16> kv, Mat<const bf16> k_pe,
                               std::int64_t heads, std::int64_t nope, std::int64_t v, Mat<const std::int32_t> selected,
                               Vec<const std::int32_t> count, float scale, Mat<bf16> out) {
    K::sparse_attention(ctx.cpu, host(q), host(kv), host(k_pe), heads, nope, v, host(selected), host(count), scale,
                        host(out));
  }
  /// \copydoc Kernels<Cpu>::latent_attention
  static void latent_attention(Context& ctx, Mat<const bf16> q_lat, Mat<const bf16> q_pe, Mat<const bf16> kv_cache,
                               Mat<const bf16> pe_cache, const CachePages<Space>& pages, std::int64_t heads,
                               Mat<const std::int32_t> selected, Vec<const std::int32_t> count, float scale,
                               Mat<bf16> out) {
    K::latent_attention(ctx.cpu, host(q_lat), host(q_pe), host(kv_cache), host(pe_cache), host(pages), heads,
                        host(selected), host(count), scale, host(out));
  }
  /// \copydoc Kernels<Cpu>::absorb_query
  static void absorb_query(Context& ctx, Mat<const bf16> q, const Weight& wkv_b, std::int64_t heads, std::int64_t nope,
                           std::int64_t v, Mat<bf16> q_lat) {
    K::absorb_query(ctx.cpu, host(q), host(wkv_b), heads, nope, v, host(q_lat));
  }
  /// \copydoc Kernels<Cpu>::project_values
  static void project_values(Context& ctx, Mat<const bf16> o_lat, const Weight& wkv_b, std::int64_t heads,
                             std::int64_t nope, Mat<bf16> out) {
    K::project_values(ctx.cpu, host(o_lat), host(wkv_b), heads, nope, host(out));
  }
  /// \copydoc Kernels<Cpu>::route
  static void route(Context& ctx, Mat<const float> logits, Vec<const float> bias, const RoutingParams& p,
                    Mat<float> weights, Mat<std::int32_t> experts) {
    K::route(ctx.cpu, host(logits), host(bias), p, host(weights), host(experts));
  }
  /// \copydoc Kernels<Cpu>::moe_plan
  static void moe_plan(Context& ctx, Mat<const std::int32_t> experts, Mat<const float> weights,
                       std::int64_t first_expert, Vec<std::int32_t> rows, Vec<float> row_weights,
                       Vec<std::int32_t> offsets) {
    K::moe_plan(ctx.cpu, host(experts), host(weights), first_expert, host(rows), host(row_weights), host(offsets));
  }
  /// \copydoc Kernels<Cpu>::gather_rows
  static void gather_rows(Context& ctx, Mat<const bf16> x, Vec<const std::int32_t> rows, Mat<bf16> out) {
    K::gather_rows(ctx.cpu, host(x), host(rows), host(out));
  }
  /// \copydoc Kernels<Cpu>::scatter_rows
  template <class T>
  static void scatter_rows(Context& ctx, Mat<const T> src, Vec<const std::int32_t> rows, Mat<T> dst) {
    K::scatter_rows(ctx.cpu, host(src), host(rows), host(dst));
  }
  /// \copydoc Kernels<Cpu>::scatter_add
  static void scatter_add(Context& ctx, Mat<const bf16> src, Vec<const std::int32_t> rows, Vec<const float> weight,
                          Mat<float> y) {
    K::scatter_add(ctx.cpu, host(src), host(rows), host(weight), host(y));
  }
  /// \copydoc Kernels<Cpu>::round_to_bf16
  static void round_to_bf16(Context& ctx, Mat<const float> x, Mat<bf16> out) {
    K::round_to_bf16(ctx.cpu, host(x), host(out));
  }
  /// \copydoc Kernels<Cpu>::widen_to_f32
  static void widen_to_f32(Context& ctx, Mat<const bf16> x, Mat<float> out) {
    K::widen_to_f32(ctx.cpu, host(x), host(out));
  }
};

static_assert(KernelsContract<testing::HostInvisible>,
              "Kernels<testing::HostInvisible> must provide every operation of the Kernels contract "
              "(backend/kernels_contract.hpp)");

/// @}

}  // namespace dsv32
