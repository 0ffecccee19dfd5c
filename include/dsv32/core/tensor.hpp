/// \file
/// \brief Shapes, views tagged with their memory space, and owning buffers and tensors.
///
/// Tensors are row-major and contiguous. Their memory belongs to a backend (Memory<Backend>);
/// a buffer may also borrow memory it does not own (a memory-mapped checkpoint, a slice of a
/// model's weight arena). Kernels see views: MatrixView<T, Space> (pointer, rows, columns, row
/// stride) and VectorView<T, Space> (pointer, size), where Space is the backend's memory space
/// (Host for the CPU backend). A view of one space does not convert to a view of another: reading
/// backend memory on the host takes an explicit copy (Memory<Backend>::copy_to_host_async()).
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

#include "dsv32/core/error.hpp"
#include "dsv32/core/space.hpp"

namespace dsv32 {

/// \addtogroup core
/// @{

/// \brief The product of non-negative sizes, checked: a product past 2^63 - 1 (a plan or shape no
///        machine could hold, usually from absurd limits or a hostile config) throws instead of wrapping.
/// \throws Error(invalid_argument) on overflow or a negative size
template <class... Sizes>
constexpr std::int64_t elements(Sizes... sizes) {
  std::int64_t n = 1;
  for (const std::int64_t s : {static_cast<std::int64_t>(sizes)...}) {
    if (s < 0) fail(ErrorKind::invalid_argument, "negative size ", s);
    if (__builtin_mul_overflow(n, s, &n))
      fail(ErrorKind::invalid_argument, "a size product overflows 64 bits (limits or shapes far beyond any machine)");
  }
  return n;
}

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

namespace detail {
// A view of memory space `From` used where a view of `To` is expected: refused with a message
// (rather than a bare "no matching function"), because it is always a mistake — another backend's
// kernel, or host code, would dereference memory it cannot read.
template <class From, class To>
constexpr void refuse_space_conversion() {
  static_assert(std::is_same_v<From, To>,
                "dsv32: a view of one memory space cannot be used as a view of another; copy the data "
                "explicitly (Memory<Backend>::copy_to_host_async / copy_from_host_async)");
}
}  // namespace detail

/// \brief A non-owning row-major matrix view in one memory space: `rows` rows of `cols` elements,
///        `stride` elements apart.
///
/// The memory belongs to whoever made the view (usually a Tensor) and must outlive it. A view of a
/// backend's memory is dereferenced only by that backend's kernels; host code dereferences only
/// views whose Space is Host.
/// \tparam T     element type; `const T` for a read-only view
/// \tparam Space memory space (Host, or a backend's `Memory<Backend>::space`)
template <class T, class Space = Host>
struct MatrixView {
  using space = Space;  ///< the memory space the pointer addresses

  T* data = nullptr;        ///< first element of row 0
  std::int64_t rows = 0;    ///< number of rows
  std::int64_t cols = 0;    ///< elements per row
  std::int64_t stride = 0;  ///< elements between the starts of consecutive rows (>= cols)

  constexpr MatrixView() = default;
  /// \brief A view of `rows` rows of `cols` elements, `stride` elements apart, starting at `data`.
  constexpr MatrixView(T* data_, std::int64_t rows_, std::int64_t cols_, std::int64_t stride_) noexcept
      : data(data_), rows(rows_), cols(cols_), stride(stride_) {}
  /// \brief Views of another memory space do not convert (a compile-time error says so).
  template <class U, class S2>
    requires(!std::is_same_v<S2, Space>)
  MatrixView(const MatrixView<U, S2>&) {  // NOLINT(google-explicit-constructor): exists to fail with a message
    detail::refuse_space_conversion<S2, Space>();
  }

  /// \brief Pointer to the first element of row `r` (unchecked; not dereferenceable on the host
  ///        unless Space is Host).
  constexpr T* row(std::int64_t r) const noexcept { return data + r * stride; }
  /// \brief Rows [first, first + count).
  constexpr MatrixView middle_rows(std::int64_t first, std::int64_t count) const noexcept {
    return {data + first * stride, count, cols, stride};
  }
  /// \brief Columns [first, first + count) of every row.
  constexpr MatrixView middle_cols(std::int64_t first, std::int64_t count) const noexcept {
    return {data + first, rows, count, stride};
  }
  /// \brief Every `step`-th row starting at `first`: `count` rows, `step * stride` apart
  ///        (e.g. the last position of every sequence of a [batch, seq] activation).
  constexpr MatrixView strided_rows(std::int64_t first, std::int64_t count, std::int64_t step) const noexcept {
    return {data + first * stride, count, cols, stride * step};
  }
  /// \brief Whether the rows are contiguous (stride == cols).
  constexpr bool contiguous() const noexcept { return stride == cols; }
  /// \brief The same view, read-only.
  constexpr operator MatrixView<const T, Space>() const noexcept { return {data, rows, cols, stride}; }
};

/// \brief A non-owning contiguous array view in one memory space.
/// \tparam T     element type; `const T` for a read-only view
/// \tparam Space memory space (Host, or a backend's `Memory<Backend>::space`)
template <class T, class Space = Host>
struct VectorView {
  using space = Space;  ///< the memory space the pointer addresses

  T* data = nullptr;      ///< first element
  std::int64_t size = 0;  ///< number of elements

  constexpr VectorView() = default;
  /// \brief A view of `size` elements starting at `data`.
  constexpr VectorView(T* data_, std::int64_t size_) noexcept : data(data_), size(size_) {}
  /// \brief Views of another memory space do not convert (a compile-time error says so).
  template <class U, class S2>
    requires(!std::is_same_v<S2, Space>)
  VectorView(const VectorView<U, S2>&) {  // NOLINT(google-explicit-constructor): exists to fail with a message
    detail::refuse_space_conversion<S2, Space>();
  }

  /// \brief Elements [first, first + count).
  constexpr VectorView subview(std::int64_t first, std::int64_t count) const noexcept { return {data + first, count}; }
  /// \brief The elements as a [rows, size / rows] matrix (rows must divide size).
  constexpr MatrixView<T, Space> as_matrix(std::int64_t rows) const noexcept {
    return {data, rows, rows ? size / rows : 0, rows ? size / rows : 0};
  }
  /// \brief The size in bytes.
  constexpr std::size_t bytes() const noexcept { return static_cast<std::size_t>(size) * sizeof(T); }
  /// \brief Whether the view holds no element.
  constexpr bool empty() const noexcept { return size == 0; }
  /// \brief The same view, read-only.
  constexpr operator VectorView<const T, Space>() const noexcept { return {data, size}; }
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

  /// \brief A buffer over memory of the backend's space owned by `owner` (kept alive as long as this
  ///        buffer; may be null when the memory outlives the buffer by other means, e.g. a slice of an
  ///        arena the same model owns).
  static Buffer borrow(T* data, std::size_t n, std::shared_ptr<const void> owner) {
    Buffer b;
    b.data_ = data;
    b.size_ = b.capacity_ = n;
    b.owner_ = std::move(owner);
    b.borrowed_ = true;
    return b;
  }

  /// \brief Replaces the contents with `n` zero-filled elements.
  void reset(std::size_t n) {
    reserve_exactly(n);
    if (n) Memory<Backend>::zero(data_, n * sizeof(T));
    size_ = n;
  }
  /// \brief Replaces the contents with `n` uninitialized elements (no zero-fill: the caller writes
  ///        them all, e.g. a copy or a kernel's output).
  void reset_uninitialized(std::size_t n) {
    reserve_exactly(n);
    size_ = n;
  }
  /// \brief Sets the size to `n`, reallocating only when it grows past the capacity; contents
  ///        are unspecified afterwards (scratch buffers reused across calls).
  void resize_scratch(std::size_t n) {
    if (n > capacity_ || borrowed_) reserve_exactly(n);
    size_ = n;
  }

  /// \brief The first element, in the backend's memory; null when empty.
  T* data() noexcept { return data_; }
  /// \copydoc data()
  const T* data() const noexcept { return data_; }
  /// \brief Number of elements.
  std::size_t size() const noexcept { return size_; }
  /// \brief Elements the memory holds (>= size()).
  std::size_t capacity() const noexcept { return capacity_; }
  /// \brief size() * sizeof(T).
  std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  /// \brief Whether the buffer holds no elements.
  bool empty() const noexcept { return size_ == 0; }
  /// \brief Whether this buffer uses memory it does not own (borrowed).
  bool borrowed() const noexcept { return borrowed_; }

 private:
  void reserve_exactly(std::size_t n) {
    release();
    if (n) data_ = static_cast<T*>(Memory<Backend>::allocate(n * sizeof(T)));
    capacity_ = n;
  }
  void swap(Buffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
    std::swap(borrowed_, o.borrowed_);
    std::swap(owner_, o.owner_);
  }
  void release() noexcept {
    if (!borrowed_ && data_) Memory<Backend>::deallocate(data_);
    data_ = nullptr;
    size_ = capacity_ = 0;
    borrowed_ = false;
    owner_.reset();
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  bool borrowed_ = false;
  std::shared_ptr<const void> owner_;
};

/// \brief An owning, contiguous, row-major tensor in a backend's memory.
/// \tparam T element type
/// \tparam Backend backend tag
template <class T, class Backend>
class Tensor {
 public:
  using space = space_of<Backend>;  ///< the memory space of the tensor's elements

  Tensor() = default;
  /// \brief A zero-filled tensor of the given shape.
  explicit Tensor(const Shape& shape) : buffer_(static_cast<std::size_t>(shape.numel())), shape_(shape) {}

  /// \brief Gives the tensor a new shape, reusing its memory when it is large enough
  ///        (contents unspecified afterwards).
  void resize(const Shape& shape) {
    buffer_.resize_scratch(static_cast<std::size_t>(shape.numel()));
    shape_ = shape;
  }
  /// \brief Makes room for `n` elements without zero-filling them (scratch reserved once, so that
  ///        later resize() calls up to `n` elements allocate nothing); the shape becomes [0].
  void reserve(std::size_t n) {
    if (n > buffer_.capacity() || buffer_.borrowed()) buffer_.reset_uninitialized(n);
    shape_ = Shape{0};
    buffer_.resize_scratch(0);
  }
  /// \brief Elements the tensor can hold without allocating.
  std::size_t capacity() const noexcept { return buffer_.capacity(); }

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
  MatrixView<T, space> mat() noexcept { return {data(), shape_.rows(), shape_.cols(), shape_.cols()}; }
  /// \copydoc mat()
  MatrixView<const T, space> mat() const noexcept { return {data(), shape_.rows(), shape_.cols(), shape_.cols()}; }
  /// \brief All elements as one array.
  VectorView<T, space> vec() noexcept { return {data(), numel()}; }
  /// \copydoc vec()
  VectorView<const T, space> vec() const noexcept { return {data(), numel()}; }

 private:
  Buffer<T, Backend> buffer_;
  Shape shape_{0};  // empty, not a scalar: a default tensor holds no elements
};

/// \brief Host memory a backend can copy to and from asynchronously (page-locked on device backends,
///        Memory<Backend>::allocate_pinned()); plain host memory the calling thread reads and writes.
/// \tparam T element type (trivially copyable)
/// \tparam Backend the backend whose asynchronous copies use it
template <class T, class Backend>
class PinnedBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "PinnedBuffer elements must be trivially copyable");

 public:
  PinnedBuffer() = default;
  /// \brief `n` uninitialized elements.
  explicit PinnedBuffer(std::size_t n) { reset(n); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  /// \brief Takes over `o`'s memory.
  PinnedBuffer(PinnedBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  /// \brief Releases this buffer's memory, then takes over `o`'s.
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~PinnedBuffer() { release(); }

  /// \brief Replaces the memory with `n` uninitialized elements.
  void reset(std::size_t n) {
    release();
    if (n) data_ = static_cast<T*>(Memory<Backend>::allocate_pinned(n * sizeof(T)));
    size_ = n;
  }
  /// \brief The first element (host memory).
  T* data() noexcept { return data_; }
  /// \copydoc data()
  const T* data() const noexcept { return data_; }
  /// \brief Number of elements.
  std::size_t size() const noexcept { return size_; }
  /// \brief Element `i` (unchecked).
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  /// \copydoc operator[]()
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  void release() noexcept {
    if (data_) Memory<Backend>::deallocate_pinned(data_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// @}

}  // namespace dsv32
