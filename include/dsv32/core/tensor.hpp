/// \file
/// \brief Shapes, owning buffers and tensors, and non-owning matrix views.
///
/// Tensors are row-major and contiguous. Their memory belongs to a backend (Memory<Backend>);
/// a buffer may also borrow memory it does not own (a memory-mapped checkpoint), keeping the
/// owner alive through a shared_ptr. Kernels see plain MatrixView<T>: pointer, rows, columns
/// and row stride.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dsv32/backend/backend.hpp"
#include "dsv32/core/error.hpp"

namespace dsv32 {

/// \addtogroup core
/// @{

/// \brief A tensor shape of rank 0 to 4.
class Shape {
 public:
  static constexpr int kMaxRank = 4;  ///< the largest rank a Shape holds ([batch, seq, heads, head_dim])

  constexpr Shape() = default;
  /// \brief A shape from up to four dimensions: `Shape{rows, cols}`.
  template <class... Dims>
    requires(sizeof...(Dims) <= kMaxRank && (std::is_integral_v<Dims> && ...))
  constexpr Shape(Dims... dims) noexcept : dims_{static_cast<std::int64_t>(dims)...}, rank_(sizeof...(Dims)) {}

  /// \brief Number of dimensions, 0 to kMaxRank; a default Shape has rank 0 (a scalar).
  constexpr int rank() const noexcept { return rank_; }
  /// \brief Dimension `i`, for `i` in [0, rank()) (unchecked).
  constexpr std::int64_t operator[](int i) const noexcept { return dims_[i]; }
  /// \brief Dimension `i`, writable, for `i` in [0, rank()) (unchecked).
  constexpr std::int64_t& operator[](int i) noexcept { return dims_[i]; }
  /// \brief Number of elements (1 for rank 0).
  constexpr std::int64_t numel() const noexcept {
    std::int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  /// \brief Last dimension (1 for rank 0).
  constexpr std::int64_t cols() const noexcept { return rank_ ? dims_[rank_ - 1] : 1; }
  /// \brief Product of all dimensions but the last.
  constexpr std::int64_t rows() const noexcept { return cols() ? numel() / cols() : 0; }

  /// \brief Same rank and same dimensions.
  friend constexpr bool operator==(const Shape& a, const Shape& b) noexcept {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i)
      if (a.dims_[i] != b.dims_[i]) return false;
    return true;
  }
  /// \brief The dimensions as a vector.
  std::vector<std::int64_t> dims() const { return std::vector<std::int64_t>(dims_.begin(), dims_.begin() + rank_); }
  /// \brief "[a, b, c]".
  std::string str() const {
    std::ostringstream os;
    os << '[';
    for (int i = 0; i < rank_; ++i) os << (i ? ", " : "") << dims_[i];
    os << ']';
    return os.str();
  }

 private:
  std::array<std::int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

/// \brief A non-owning row-major matrix view: `rows` rows of `cols` elements, `stride` apart.
///
/// The memory belongs to whoever made the view (usually a Tensor) and must outlive it; a view
/// into a backend's memory is only dereferenced by that backend's kernels.
/// \tparam T element type; `const T` for a read-only view
template <class T>
struct MatrixView {
  T* data = nullptr;        ///< first element of row 0
  std::int64_t rows = 0;    ///< number of rows
  std::int64_t cols = 0;    ///< elements per row
  std::int64_t stride = 0;  ///< elements between the starts of consecutive rows (>= cols)

  /// \brief Pointer to the first element of row `r` (unchecked).
  T* row(std::int64_t r) const noexcept { return data + r * stride; }
  /// \brief Rows [first, first + count).
  MatrixView middle_rows(std::int64_t first, std::int64_t count) const noexcept {
    return {data + first * stride, count, cols, stride};
  }
  /// \brief Columns [first, first + count) of every row.
  MatrixView middle_cols(std::int64_t first, std::int64_t count) const noexcept {
    return {data + first, rows, count, stride};
  }
  /// \brief The same view, read-only.
  operator MatrixView<const T>() const noexcept { return {data, rows, cols, stride}; }
};

/// \brief A contiguous array of T in a backend's memory, owned or borrowed.
/// \tparam T element type (trivially copyable)
/// \tparam Backend backend tag whose Memory<> allocates it
template <class T, class Backend>
class Buffer {
  static_assert(std::is_trivially_copyable_v<T>, "Buffer elements must be trivially copyable");

 public:
  Buffer() = default;
  /// \brief Allocates `n` zero-filled elements.
  explicit Buffer(std::size_t n) { reset(n); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  /// \brief Takes over `o`'s memory (owned or borrowed); `o` is left empty.
  Buffer(Buffer&& o) noexcept { swap(o); }
  /// \brief Releases this buffer's memory, then takes over `o`'s; `o` is left empty.
  Buffer& operator=(Buffer&& o) noexcept {
    Buffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~Buffer() { release(); }

  /// \brief A buffer over memory owned by `owner` (kept alive as long as this buffer).
  static Buffer borrow(T* data, std::size_t n, std::shared_ptr<const void> owner) {
    Buffer b;
    b.data_ = data;
    b.size_ = b.capacity_ = n;
    b.owner_ = std::move(owner);
    return b;
  }

  /// \brief Replaces the contents with `n` zero-filled elements.
  void reset(std::size_t n) {
    release();
    if (n) {
      data_ = static_cast<T*>(Memory<Backend>::allocate(n * sizeof(T)));
      Memory<Backend>::zero(data_, n * sizeof(T));
    }
    size_ = capacity_ = n;
    owns_ = n != 0;
  }
  /// \brief Sets the size to `n`, reallocating only when it grows past the capacity; contents
  ///        are unspecified afterwards (scratch buffers reused across calls).
  void resize_scratch(std::size_t n) {
    if (n > capacity_ || !owns_) reset(n);
    size_ = n;
  }

  /// \brief The first element, in the backend's memory; null when empty.
  T* data() noexcept { return data_; }
  /// \copydoc data()
  const T* data() const noexcept { return data_; }
  /// \brief Number of elements.
  std::size_t size() const noexcept { return size_; }
  /// \brief size() * sizeof(T).
  std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  /// \brief Whether the buffer holds no elements.
  bool empty() const noexcept { return size_ == 0; }
  /// \brief Whether this buffer borrows memory it does not own.
  bool borrowed() const noexcept { return owner_ != nullptr; }

 private:
  void swap(Buffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
    std::swap(owns_, o.owns_);
    std::swap(owner_, o.owner_);
  }
  void release() noexcept {
    if (owns_ && data_) Memory<Backend>::deallocate(data_);
    data_ = nullptr;
    size_ = capacity_ = 0;
    owns_ = false;
    owner_.reset();
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  bool owns_ = false;
  std::shared_ptr<const void> owner_;
};

/// \brief An owning, contiguous, row-major tensor in a backend's memory.
/// \tparam T element type
/// \tparam Backend backend tag
template <class T, class Backend>
class Tensor {
 public:
  Tensor() = default;
  /// \brief A zero-filled tensor of the given shape.
  explicit Tensor(const Shape& shape) : buffer_(static_cast<std::size_t>(shape.numel())), shape_(shape) {}

  /// \brief Gives the tensor a new shape, reusing its memory when it is large enough
  ///        (contents unspecified afterwards).
  void resize(const Shape& shape) {
    buffer_.resize_scratch(static_cast<std::size_t>(shape.numel()));
    shape_ = shape;
  }

  /// \brief The shape; a default tensor's is [0].
  const Shape& shape() const noexcept { return shape_; }
  /// \brief Dimension `i` of the shape (unchecked).
  std::int64_t dim(int i) const noexcept { return shape_[i]; }
  /// \brief Number of elements.
  std::int64_t numel() const noexcept { return shape_.numel(); }
  /// \brief The first element, in the backend's memory; null when the tensor is empty.
  T* data() noexcept { return buffer_.data(); }
  /// \copydoc data()
  const T* data() const noexcept { return buffer_.data(); }
  /// \brief numel() * sizeof(T).
  std::size_t bytes() const noexcept { return buffer_.bytes(); }

  /// \brief The tensor as a matrix: [product of leading dims, last dim]. Valid until the next
  ///        resize() or the tensor's destruction.
  MatrixView<T> mat() noexcept { return {data(), shape_.rows(), shape_.cols(), shape_.cols()}; }
  /// \copydoc mat()
  MatrixView<const T> mat() const noexcept { return {data(), shape_.rows(), shape_.cols(), shape_.cols()}; }

 private:
  Buffer<T, Backend> buffer_;
  Shape shape_{0};  // empty, not a scalar: a default tensor holds no elements
};

/// @}

}  // namespace dsv32
