/// \file
/// \brief Parameter: one weight tensor of a layer — its in-memory dtype and local shape fixed at
///        construction, its memory bound later (loaded, borrowed from a mapped file, or initialized).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dsv32/backend/backend.hpp"
#include "dsv32/core/dtype.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/tensor.hpp"

namespace dsv32 {

/// \defgroup layers Layers
/// \brief The model's modules, templated on the compile-time config and the backend.
/// @{

/// \brief A weight tensor. Constructing one allocates nothing, so a model of any size can list its
///        tensors (names, dtypes, shapes, bytes) before, or without, loading them.
/// \tparam Backend backend tag
template <class Backend>
class Parameter {
 public:
  Parameter() = default;
  /// \param dtype in-memory element type (the reference's parameter dtype)
  /// \param shape local shape on this rank
  Parameter(DType dtype, Shape shape) : dtype_(dtype), shape_(shape) {}

  /// \brief In-memory element type.
  DType dtype() const noexcept { return dtype_; }
  /// \brief Local shape on this rank.
  const Shape& shape() const noexcept { return shape_; }
  /// \brief Number of elements.
  std::int64_t numel() const noexcept { return shape_.numel(); }
  /// \brief Bytes the tensor occupies once loaded.
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  /// \brief Whether memory is bound (allocated, copied, borrowed or filled).
  bool loaded() const noexcept { return loaded_; }

  /// \brief Whether a file tensor of dtype `file` can be loaded: the same dtype, or BF16 into an
  ///        F32 parameter (widened exactly, as the reference does for norms and the head).
  bool accepts(DType file) const noexcept { return file == dtype_ || (dtype_ == DType::F32 && file == DType::BF16); }

  /// \brief The bound memory, in the backend's memory space.
  /// \throws Error(state) when the parameter is not loaded
  const void* data() const {
    DSV32_CHECK(loaded_, state, "parameter not loaded");
    return buffer_.data();
  }
  /// \brief data() as `const T*`; T must match dtype() (unchecked).
  /// \tparam T element type: float, bf16 or std::uint8_t (E4M3 codes)
  /// \throws Error(state) when the parameter is not loaded
  template <class T>
  const T* as() const { return static_cast<const T*>(data()); }

  /// \brief Owns fresh zero-filled memory.
  void allocate() {
    buffer_.reset(bytes());
    loaded_ = true;
  }
  /// \brief Uses host memory owned by `owner` in place (only for backends whose memory is host memory).
  void borrow(const void* host, std::shared_ptr<const void> owner) {
    if constexpr (Memory<Backend>::host_visible) {
      buffer_ = Buffer<std::byte, Backend>::borrow(const_cast<std::byte*>(static_cast<const std::byte*>(host)), bytes(),
                                                   std::move(owner));
      loaded_ = true;
    } else {
      fail(ErrorKind::unsupported, "backend ", Backend::name, " cannot borrow host memory");
    }
  }
  /// \brief Owns a copy of `bytes()` bytes of host data in this dtype.
  void copy_from_host(const void* host) {
    allocate();
    Memory<Backend>::copy_from_host(buffer_.data(), host, bytes());
  }
  /// \brief Owns a copy of host data of dtype `src_dtype` (same dtype, or BF16 widened into F32).
  ///        `src` may be unaligned.
  void convert_from_host(const void* src, DType src_dtype) {
    if (src_dtype == dtype_) return copy_from_host(src);
    DSV32_CHECK(dtype_ == DType::F32 && src_dtype == DType::BF16, invalid_file, "cannot convert ",
                dtype_name(src_dtype), " into a ", dtype_name(dtype_), " parameter");
    std::vector<float> wide(static_cast<std::size_t>(numel()));
    const auto* b = static_cast<const unsigned char*>(src);
    for (std::size_t i = 0; i < wide.size(); ++i) {
      std::uint16_t raw;
      std::memcpy(&raw, b + 2 * i, 2);
      wide[i] = static_cast<float>(Eigen::numext::bit_cast<bf16>(raw));
    }
    copy_from_host(wide.data());
  }
  /// \brief Fills with values from `gen(i)` (a float per element) in this dtype; FP8 parameters receive
  ///        the E4M3 encoding of each value.
  /// \tparam Gen callable as `float gen(std::size_t element_index)`
  /// \throws Error(unsupported) for a dtype other than F32, BF16 or F8_E4M3
  template <class Gen>
  void fill_host(Gen&& gen) {
    const std::size_t n = static_cast<std::size_t>(numel());
    std::vector<std::byte> host(bytes());
    for (std::size_t i = 0; i < n; ++i) {
      const float v = gen(i);
      switch (dtype_) {
        case DType::F32: std::memcpy(host.data() + 4 * i, &v, 4); break;
        case DType::BF16: { const bf16 b(v); std::memcpy(host.data() + 2 * i, &b, 2); break; }
        case DType::F8_E4M3: host[i] = static_cast<std::byte>(encode_e4m3(v)); break;
        default: fail(ErrorKind::unsupported, "fill of a ", dtype_name(dtype_), " parameter");
      }
    }
    copy_from_host(host.data());
  }
  /// \brief Drops the memory (the parameter becomes unloaded).
  void release() {
    buffer_ = Buffer<std::byte, Backend>();
    loaded_ = false;
  }
  /// \brief Whether the memory is borrowed from a mapped file rather than owned.
  bool borrowed() const noexcept { return buffer_.borrowed(); }

 private:
  DType dtype_ = DType::F32;
  Shape shape_;
  Buffer<std::byte, Backend> buffer_;
  bool loaded_ = false;
};

/// @}

}  // namespace dsv32
