/// \file
/// \brief Parameter: one tensor of the tensor table bound to backend memory (loaded into the model's
///        weight arena, borrowed from a mapped file, or owned); ParameterStore: a model's parameters in
///        table order, which the layers bind by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "dsv32/config/tensor_table.hpp"
#include "dsv32/core/dtype.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/space.hpp"
#include "dsv32/core/tensor.hpp"

namespace dsv32 {

/// \addtogroup layers
/// @{

/// \brief A weight tensor: its row of the tensor table (name, role, dtype, local shape, split) and the
///        backend memory bound to it. Constructing one allocates nothing, so a model of any size can
///        list its tensors before, or without, loading them.
/// \tparam Backend backend tag
template <class Backend>
class Parameter {
 public:
  using space = space_of<Backend>;  ///< the memory space of the parameter's data

  Parameter() = default;
  /// \param spec the tensor's row of the table; the parameter holds its local shape
  explicit Parameter(const TensorSpec& spec) : spec_(spec), name_(spec.name()) {}
  /// \brief A stand-alone parameter (not from a model's table): a weight named `name`.
  /// \param dtype in-memory element type
  /// \param shape its shape
  /// \param name  a name for messages
  Parameter(DType dtype, Shape shape, std::string name = "parameter") : name_(std::move(name)) {
    spec_.dtype = dtype;
    spec_.shape = spec_.local = shape;
  }

  /// \brief The tensor's row of the table.
  const TensorSpec& spec() const noexcept { return spec_; }
  /// \brief Its dsv32 name (`layers.0.attn.wq_a.weight`).
  const std::string& name() const noexcept { return name_; }
  /// \brief What the tensor is.
  TensorRole role() const noexcept { return spec_.role; }
  /// \brief In-memory element type.
  DType dtype() const noexcept { return spec_.dtype; }
  /// \brief Local shape on this rank.
  const Shape& shape() const noexcept { return spec_.local; }
  /// \brief Number of elements.
  std::int64_t numel() const noexcept { return shape().numel(); }
  /// \brief Bytes the tensor occupies once loaded.
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(numel()) * dtype_size(dtype()); }
  /// \brief Whether memory is bound (allocated, copied, borrowed or filled).
  bool loaded() const noexcept { return loaded_; }
  /// \brief Whether the memory is host memory borrowed in place (a memory-mapped file) rather than
  ///        backend memory of its own or of the model's weight arena.
  bool borrowed() const noexcept { return mapped_; }

  /// \brief Whether a file tensor of dtype `file` can be loaded: the same dtype, or BF16 into an
  ///        F32 parameter (widened exactly, as the reference does for norms).
  bool accepts(DType file) const noexcept { return file == dtype() || (dtype() == DType::F32 && file == DType::BF16); }

  /// \brief The bound memory, in the backend's memory space.
  /// \throws Error(state) when the parameter is not loaded
  const void* data() const {
    DSV32_CHECK(loaded_, state, "parameter ", name_, " not loaded");
    return buffer_.data();
  }
  /// \brief data() as `const T*` (backend memory); T must match dtype() (unchecked).
  /// \tparam T element type: float, bf16 or std::uint8_t (E4M3 codes)
  /// \throws Error(state) when the parameter is not loaded
  template <class T>
  const T* as() const { return static_cast<const T*>(data()); }
  /// \brief The parameter as a [rows, cols] matrix of its local shape, in the backend's space.
  template <class T>
  MatrixView<const T, space> mat() const { return {as<T>(), shape().rows(), shape().cols(), shape().cols()}; }
  /// \brief The parameter as one array, in the backend's space.
  template <class T>
  VectorView<const T, space> vec() const { return {as<T>(), numel()}; }

  /// \brief Uses `bytes()` bytes of backend memory at `memory` that someone else keeps alive (a slice
  ///        of the model's weight arena); the caller fills them.
  void bind(void* memory) {
    buffer_ = Buffer<std::byte, Backend>::borrow(static_cast<std::byte*>(memory), bytes(), nullptr);
    loaded_ = true;
    mapped_ = false;
  }
  /// \brief Uses host memory owned by `owner` in place (only for backends whose memory is host memory).
  /// \throws Error(unsupported) on a backend the host cannot share memory with
  void borrow(const void* host, std::shared_ptr<const void> owner) {
    if constexpr (Memory<Backend>::host_visible) {
      buffer_ = Buffer<std::byte, Backend>::borrow(const_cast<std::byte*>(static_cast<const std::byte*>(host)), bytes(),
                                                   std::move(owner));
      loaded_ = true;
      mapped_ = true;
    } else {
      (void)host, (void)owner;
      fail(ErrorKind::unsupported, "backend ", Backend::name, " cannot borrow host memory");
    }
  }
  /// \brief Owns fresh zero-filled memory (a stand-alone parameter; models bind theirs to an arena).
  void allocate() {
    buffer_.reset(bytes());
    loaded_ = true;
    mapped_ = false;
  }
  /// \brief Owns a copy of `bytes()` bytes of host data in this dtype.
  void copy_from_host(const void* host) {
    buffer_.reset_uninitialized(bytes());
    Memory<Backend>::copy_from_host(buffer_.data(), host, bytes());
    loaded_ = true;
    mapped_ = false;
  }
  /// \brief Owns a copy of host data of dtype `src_dtype` (same dtype, or BF16 widened into F32).
  ///        `src` may be unaligned.
  void convert_from_host(const void* src, DType src_dtype) {
    DSV32_CHECK(accepts(src_dtype), invalid_file, "cannot convert ", dtype_name(src_dtype), " into a ",
                dtype_name(dtype()), " parameter");
    std::vector<std::byte> host(bytes());
    convert_host(src, src_dtype, dtype(), static_cast<std::size_t>(numel()), host.data());
    copy_from_host(host.data());
  }
  /// \brief Fills with values from `gen(i)` (a float per element) in this dtype; FP8 parameters receive
  ///        the E4M3 encoding of each value.
  /// \tparam Gen callable as `float gen(std::size_t element_index)`
  /// \throws Error(unsupported) for a dtype other than F32, BF16 or F8_E4M3
  template <class Gen>
  void fill_host(Gen&& gen) {
    std::vector<std::byte> host(bytes());
    encode_host(dtype(), 0, static_cast<std::size_t>(numel()), host.data(), gen);
    copy_from_host(host.data());
  }
  /// \brief Drops the memory (the parameter becomes unloaded).
  void release() {
    buffer_ = Buffer<std::byte, Backend>();
    loaded_ = false;
    mapped_ = false;
  }

  /// \brief Converts `n` elements of host data from `from` to `to` (the same dtype: a copy; BF16 to
  ///        F32: exact widening). `src` may be unaligned.
  static void convert_host(const void* src, DType from, DType to, std::size_t n, void* dst) {
    if (from == to) {
      std::memcpy(dst, src, n * dtype_size(to));
      return;
    }
    DSV32_CHECK(to == DType::F32 && from == DType::BF16, invalid_file, "cannot convert ", dtype_name(from), " into a ",
                dtype_name(to), " parameter");
    const auto* b = static_cast<const unsigned char*>(src);
    auto* out = static_cast<unsigned char*>(dst);
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t raw;
      std::memcpy(&raw, b + 2 * i, 2);
      const float f = static_cast<float>(Eigen::numext::bit_cast<bf16>(raw));
      std::memcpy(out + 4 * i, &f, 4);
    }
  }
  /// \brief Encodes gen(first), ..., gen(first + n - 1) in `dtype` into host memory `dst`.
  template <class Gen>
  static void encode_host(DType dtype, std::size_t first, std::size_t n, void* dst, Gen&& gen) {
    auto* out = static_cast<unsigned char*>(dst);
// GCC 12 at -O3, inlining a fill of a small FP8 buffer whose size it knows, flags the F32 and BF16
// stores that the dtype rules out at run time (-Wstringop-overflow, a false positive)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
    for (std::size_t i = 0; i < n; ++i) {
      const float v = gen(first + i);
      switch (dtype) {
        case DType::F32: std::memcpy(out + 4 * i, &v, 4); break;
        case DType::BF16: { const bf16 b(v); std::memcpy(out + 2 * i, &b, 2); break; }
        case DType::F8_E4M3: out[i] = encode_e4m3(v); break;
        default: fail(ErrorKind::unsupported, "fill of a ", dtype_name(dtype), " parameter");
      }
    }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  }

 private:
  TensorSpec spec_;
  std::string name_;
  Buffer<std::byte, Backend> buffer_;
  bool loaded_ = false;
  bool mapped_ = false;
};

/// \brief The parameters of one model-parallel rank of a model, in tensor-table order.
///
/// Built from the table (for_each_tensor()); the layers bind theirs by name (use()), and construction
/// ends with check_all_used(), so a table row no layer reads, or a layer reading a tensor the table
/// does not declare, is caught when the model is built. Parameters never move once the store exists.
/// \tparam Backend backend tag
template <class Backend>
class ParameterStore {
 public:
  /// \brief The parameters of rank `rank` of `world` of a model with fields `a`.
  /// \throws Error(invalid_argument) when `world` does not divide a split dimension (named)
  ParameterStore(const ModelArgs& a, int world, int rank) {
    for_each_tensor(a, [&](const TensorSpec& t) { params_.emplace_back(t); }, TableMode::instances, world, rank);
    index();
  }
  /// \brief Parameters for the given rows (stand-alone layers in tests).
  explicit ParameterStore(const std::vector<TensorSpec>& specs) {
    for (const TensorSpec& t : specs) params_.emplace_back(t);
    index();
  }
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;
  /// \brief Moves the parameters (addresses stay valid: the vector's storage moves along).
  ParameterStore(ParameterStore&&) noexcept = default;
  /// \brief Moves the parameters in.
  ParameterStore& operator=(ParameterStore&&) noexcept = default;

  /// \brief The parameter called `name`, marked as used by a layer.
  /// \throws Error(state) naming it when the table has no such tensor (a layer/table mismatch)
  Parameter<Backend>& use(const std::string& name) {
    Parameter<Backend>* p = find(name);
    DSV32_CHECK(p != nullptr, state, "a layer reads tensor ", name, ", which the tensor table does not declare");
    ++uses_[static_cast<std::size_t>(p - params_.data())];
    return *p;
  }
  /// \brief The parameter called `name` if the table has it (then marked as used), else nullptr.
  Parameter<Backend>* use_if_present(const std::string& name) {
    Parameter<Backend>* p = find(name);
    if (p) ++uses_[static_cast<std::size_t>(p - params_.data())];
    return p;
  }
  /// \brief Checks that every parameter was bound by exactly one layer.
  /// \throws Error(state) naming the first tensor no layer (or more than one) reads
  void check_all_used() const {
    for (std::size_t i = 0; i < params_.size(); ++i)
      DSV32_CHECK(uses_[i] == 1, state, "tensor ", params_[i].name(), " of the tensor table is read by ", uses_[i],
                  " layers (expected exactly one)");
  }
  /// \brief The parameter called `name`, or nullptr.
  Parameter<Backend>* find(const std::string& name) {
    const auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &params_[it->second];
  }

  /// \brief Number of parameters.
  std::size_t size() const noexcept { return params_.size(); }
  /// \brief Parameter `i`, in table order.
  Parameter<Backend>& operator[](std::size_t i) noexcept { return params_[i]; }
  /// \copydoc operator[]()
  const Parameter<Backend>& operator[](std::size_t i) const noexcept { return params_[i]; }
  /// \brief Iteration in table order.
  auto begin() noexcept { return params_.begin(); }
  /// \copydoc begin()
  auto end() noexcept { return params_.end(); }
  /// \copydoc begin()
  auto begin() const noexcept { return params_.begin(); }
  /// \copydoc begin()
  auto end() const noexcept { return params_.end(); }

 private:
  void index() {
    by_name_.reserve(params_.size());
    for (std::size_t i = 0; i < params_.size(); ++i) by_name_.emplace(params_[i].name(), i);
    uses_.assign(params_.size(), 0);
  }

  std::vector<Parameter<Backend>> params_;
  std::unordered_map<std::string, std::size_t> by_name_;
  std::vector<int> uses_;
};

/// \brief Writes weights into backend memory while loading: straight into the destination on a
///        backend whose memory is host memory, otherwise through a bounded pinned staging buffer (two
///        halves, filled and copied in turn), so that loading never holds more host memory than the
///        mapped files and this buffer.
/// \tparam Backend backend tag
template <class Backend>
class WeightUploader {
 public:
  /// Default staging size: 64 MiB (two halves of 32 MiB).
  static constexpr std::size_t kDefaultStagingBytes = std::size_t{64} << 20;

  /// \param ctx           the context the copies are ordered on (synchronized by finish())
  /// \param staging_bytes the pinned buffer's size (device backends only; at least 2 x 64 KiB)
  explicit WeightUploader(ExecutionContext<Backend>& ctx, std::size_t staging_bytes = kDefaultStagingBytes) : ctx_(ctx) {
    if constexpr (!Memory<Backend>::host_visible) {
      const std::size_t half = std::max<std::size_t>(staging_bytes / 2, std::size_t{64} << 10);
      for (auto& h : halves_) h.reset(half);
    } else {
      (void)staging_bytes;
    }
  }
  WeightUploader(const WeightUploader&) = delete;
  WeightUploader& operator=(const WeightUploader&) = delete;
  ~WeightUploader() {
    try {
      finish();
    } catch (...) {  // an error is already on its way (the load is being undone)
    }
  }

  /// \brief Writes `n` elements of dtype `dtype` to backend memory `dst`, as produced by
  ///        `produce(first, count, host)`, which writes elements [first, first + count) into host
  ///        memory `host` (chunk by chunk, in order).
  template <class Produce>
  void write(void* dst, DType dtype, std::size_t n, Produce&& produce) {
    if constexpr (Memory<Backend>::host_visible) {
      produce(std::size_t{0}, n, dst);
    } else {
      const std::size_t size = dtype_size(dtype), per_chunk = halves_[0].size() / size;
      for (std::size_t first = 0; first < n; first += per_chunk) {
        const std::size_t count = std::min(per_chunk, n - first);
        if (pending_[current_]) {  // this half's last copy must be done before it is refilled
          Memory<Backend>::synchronize(ctx_);
          pending_[0] = pending_[1] = false;
        }
        produce(first, count, halves_[current_].data());
        Memory<Backend>::copy_from_host_async(ctx_, static_cast<std::byte*>(dst) + first * size,
                                              halves_[current_].data(), count * size);
        pending_[current_] = true;
        current_ ^= 1;
      }
    }
  }
  /// \brief Writes `n` elements of host data `src` (dtype `from`, possibly unaligned) converted to
  ///        `to` (the same dtype, or BF16 widened to F32) into backend memory `dst`.
  void copy(void* dst, const void* src, DType from, DType to, std::size_t n) {
    const auto* bytes = static_cast<const std::byte*>(src);
    write(dst, to, n, [&](std::size_t first, std::size_t count, void* host) {
      Parameter<Backend>::convert_host(bytes + first * dtype_size(from), from, to, count, host);
    });
  }
  /// \brief Waits for every copy (the data may then be used, and the sources freed).
  void finish() {
    if (pending_[0] || pending_[1]) Memory<Backend>::synchronize(ctx_);
    pending_[0] = pending_[1] = false;
  }
  /// \brief The pinned staging memory held (0 on a host-memory backend).
  std::size_t staging_bytes() const noexcept { return halves_[0].size() + halves_[1].size(); }

 private:
  ExecutionContext<Backend>& ctx_;
  PinnedBuffer<std::byte, Backend> halves_[2];
  bool pending_[2] = {false, false};
  int current_ = 0;
};

/// @}

}  // namespace dsv32
