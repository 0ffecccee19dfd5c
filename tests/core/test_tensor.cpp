// Tests of dsv32/core/tensor.hpp and dsv32/core/dtype.hpp: shapes, matrix views, owned and
// borrowed buffers (a borrow keeps its owner alive), and tensor resizing that reuses memory.
#include "dsv32/backend/cpu/memory.hpp"
#include "dsv32/core/dtype.hpp"
#include "dsv32/core/tensor.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

namespace {
using dsv32::Buffer;
using dsv32::Cpu;
using dsv32::DType;
using dsv32::MatrixView;
using dsv32::Shape;
using dsv32::Tensor;
}  // namespace

TEST_CASE("Shape: rank, numel, rows and cols, equality, printing") {
  constexpr Shape s{2, 3, 4};
  static_assert(s.rank() == 3 && s.numel() == 24 && s.cols() == 4 && s.rows() == 6);
  CHECK(s[0] == 2);
  CHECK(s[1] == 3);
  CHECK(s[2] == 4);
  CHECK(s.dims() == std::vector<std::int64_t>{2, 3, 4});
  CHECK(s.str() == "[2, 3, 4]");

  const Shape scalar;
  CHECK(scalar.rank() == 0);
  CHECK(scalar.numel() == 1);
  CHECK(scalar.cols() == 1);
  CHECK(scalar.rows() == 1);
  CHECK(scalar.str() == "[]");
  CHECK(scalar.dims().empty());

  CHECK(Shape{7}.rows() == 1);
  CHECK(Shape{7}.cols() == 7);
  CHECK(Shape{5, 0}.numel() == 0);
  CHECK(Shape{5, 0}.rows() == 0);  // no columns: no rows either (no division by zero)
  CHECK(Shape{0, 5}.rows() == 0);
  CHECK(Shape{1, 2, 3, 4}.numel() == 24);
  CHECK(Shape{std::int64_t{1} << 40, 2}.numel() == std::int64_t{1} << 41);  // 64-bit dimensions

  CHECK(Shape{2, 3} == Shape{2, 3});
  CHECK_FALSE(Shape{2, 3} == Shape{3, 2});
  CHECK_FALSE(Shape{2, 3} == Shape{2, 3, 1});  // rank matters
  CHECK_FALSE(Shape{6} == Shape{2, 3});

  Shape m{4, 4};
  m[1] = 9;
  CHECK(m == Shape{4, 9});
}

TEST_CASE("MatrixView: rows, middle rows and columns address the right elements") {
  std::vector<int> data(5 * 6);
  std::iota(data.begin(), data.end(), 0);
  const MatrixView<int> v{data.data(), 5, 6, 6};
  CHECK(v.row(2)[3] == 15);
  const auto rows = v.middle_rows(1, 3);
  CHECK(rows.rows == 3);
  CHECK(rows.cols == 6);
  CHECK(rows.row(0)[0] == 6);
  const auto cols = v.middle_cols(2, 3);
  CHECK(cols.rows == 5);
  CHECK(cols.cols == 3);
  CHECK(cols.stride == 6);
  CHECK(cols.row(4)[2] == 4 * 6 + 4);
  const MatrixView<const int> c = cols;  // converts to a read-only view
  CHECK(c.row(1)[0] == 8);
}

TEST_CASE("Buffer: owned memory is zero-filled, aligned and movable") {
  Buffer<float, Cpu> b(10);
  CHECK(b.size() == 10);
  CHECK(b.bytes() == 40);
  CHECK_FALSE(b.empty());
  CHECK_FALSE(b.borrowed());
  CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % dsv32::Memory<Cpu>::alignment == 0);
  for (std::size_t i = 0; i < b.size(); ++i) CHECK(b.data()[i] == 0.0f);
  b.data()[3] = 5.0f;
  float* p = b.data();

  Buffer<float, Cpu> moved(std::move(b));
  CHECK(moved.data() == p);
  CHECK(moved.data()[3] == 5.0f);
  CHECK(b.empty());  // NOLINT(bugprone-use-after-move): a moved-from buffer is empty
  CHECK(b.data() == nullptr);

  Buffer<float, Cpu> assigned;
  assigned = std::move(moved);
  CHECK(assigned.data() == p);
  CHECK(assigned.size() == 10);

  assigned.reset(3);
  CHECK(assigned.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(assigned.data()[i] == 0.0f);
  assigned.reset(0);
  CHECK(assigned.empty());
  CHECK(assigned.data() == nullptr);
  CHECK(Buffer<float, Cpu>().empty());
}

TEST_CASE("Buffer: a borrow keeps its owner alive until the last buffer referring to it goes") {
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4});
  const std::weak_ptr<std::vector<float>> watch = owner;
  float* data = owner->data();
  {
    auto b = Buffer<float, Cpu>::borrow(data, owner->size(), owner);
    owner.reset();  // only the buffer holds the vector now
    CHECK_FALSE(watch.expired());
    CHECK(b.borrowed());
    CHECK(b.data() == data);
    CHECK(b.size() == 4);
    CHECK(b.data()[2] == 3.0f);

    Buffer<float, Cpu> moved(std::move(b));  // ownership of the owner moves along
    CHECK_FALSE(watch.expired());
    CHECK(moved.borrowed());
    CHECK_FALSE(b.borrowed());  // NOLINT(bugprone-use-after-move)
  }
  CHECK(watch.expired());  // released with the last buffer

  // a borrowed buffer never writes into the borrowed memory when it needs scratch space
  auto owner2 = std::make_shared<std::vector<float>>(8, 7.0f);
  auto b2 = Buffer<float, Cpu>::borrow(owner2->data(), 8, owner2);
  b2.resize_scratch(4);
  CHECK_FALSE(b2.borrowed());
  CHECK(b2.data() != owner2->data());
  CHECK(owner2.use_count() == 1);
  CHECK((*owner2)[0] == 7.0f);
}

TEST_CASE("Tensor: zero-filled construction, resize reuses memory until it must grow") {
  Tensor<float, Cpu> t(Shape{4, 8});
  CHECK(t.numel() == 32);
  CHECK(t.bytes() == 128);
  CHECK(t.dim(0) == 4);
  CHECK(t.dim(1) == 8);
  for (std::int64_t i = 0; i < t.numel(); ++i) CHECK(t.data()[i] == 0.0f);
  float* p = t.data();

  t.resize(Shape{2, 8});  // smaller: same memory
  CHECK(t.data() == p);
  CHECK(t.shape() == Shape{2, 8});
  CHECK(t.bytes() == 64);
  t.resize(Shape{4, 2, 4});  // back to the capacity: same memory
  CHECK(t.data() == p);
  CHECK(t.numel() == 32);
  t.resize(Shape{5, 8});  // larger: new memory of the new size
  CHECK(t.numel() == 40);
  CHECK(t.bytes() == 160);
  t.data()[39] = 1.0f;  // the whole new extent is addressable

  const auto m = t.mat();
  CHECK(m.rows == 5);
  CHECK(m.cols == 8);
  CHECK(m.stride == 8);
  CHECK(m.data == t.data());
  Tensor<float, Cpu> r3(Shape{2, 3, 4});
  CHECK(r3.mat().rows == 6);
  CHECK(r3.mat().cols == 4);

  Tensor<float, Cpu> empty;
  CHECK(empty.bytes() == 0);  // nothing allocated
  empty.resize(Shape{3});
  CHECK(empty.bytes() == 12);
}

TEST_CASE("dtype: names, sizes and parsing") {
  struct Row {
    DType t;
    const char* name;
    std::size_t size;
  };
  const Row rows[] = {{DType::F32, "F32", 4},  {DType::BF16, "BF16", 2}, {DType::F8_E4M3, "F8_E4M3", 1},
                      {DType::F16, "F16", 2},  {DType::F64, "F64", 8},   {DType::I64, "I64", 8},
                      {DType::I32, "I32", 4},  {DType::I16, "I16", 2},   {DType::I8, "I8", 1},
                      {DType::U8, "U8", 1},    {DType::BOOL, "BOOL", 1}};
  for (const Row& r : rows) {
    CAPTURE(r.name);
    CHECK(dsv32::dtype_name(r.t) == r.name);
    CHECK(dsv32::dtype_size(r.t) == r.size);
    REQUIRE(dsv32::parse_dtype(r.name).has_value());
    CHECK(*dsv32::parse_dtype(r.name) == r.t);
  }
  CHECK_FALSE(dsv32::parse_dtype("f32").has_value());  // case matters, as in safetensors
  CHECK_FALSE(dsv32::parse_dtype("F8_E5M2").has_value());
  CHECK_FALSE(dsv32::parse_dtype("").has_value());
  static_assert(dsv32::parse_dtype("BF16") == DType::BF16);
}
