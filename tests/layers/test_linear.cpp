// Tests of dsv32/weights/parameter.hpp and linear.hpp: a Parameter's dtype rules, conversion, filling,
// borrowing and release; ParameterStore's binding checks; the Linear, RMSNorm, LayerNorm and
// Embedding layers bound by name, their default eps and their use of the kernels.
#include "dsv32/backend/cpu/kernels.hpp"
#include "dsv32/config/presets.hpp"
#include "dsv32/layers/linear.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>
#include "support/test_support.hpp"

using dsv32::test::contains;
using dsv32::test::error_of;

namespace {

using dsv32::bf16;
using dsv32::Cpu;
using dsv32::DType;
using dsv32::ErrorKind;
using dsv32::ScaleFmt;
using dsv32::Shape;
using Param = dsv32::Parameter<Cpu>;


// A row of a stand-alone tensor table (tests build layers outside a model).
dsv32::TensorSpec spec(std::string_view module, std::string_view leaf, DType dtype, Shape shape,
                       dsv32::TensorRole role = dsv32::TensorRole::weight) {
  dsv32::TensorSpec t;
  t.module = module;
  t.leaf = leaf;
  t.dtype = dtype;
  t.shape = t.local = shape;
  t.role = role;
  return t;
}

// Loads every parameter of a store with values from gen(name, index).
template <class Gen>
void fill(dsv32::ParameterStore<Cpu>& store, Gen&& gen) {
  for (Param& p : store) p.fill_host([&](std::size_t i) { return gen(p.name(), i); });
}

// A call context for one rank.
struct Call {
  dsv32::ExecutionContext<Cpu> exec;
  dsv32::ForwardContext<Cpu> ctx;
  Call() { ctx.exec = &exec; }
};

}  // namespace

TEST_CASE("Parameter: shape and bytes before loading, the dtypes it accepts, data() refused until bound") {
  Param p(DType::F32, Shape{2, 3});
  CHECK(p.numel() == 6);
  CHECK(p.bytes() == 24);
  CHECK_FALSE(p.loaded());
  CHECK_FALSE(p.borrowed());
  CHECK(std::string(error_of([&] { (void)p.data(); }, ErrorKind::state)).find("not loaded") != std::string::npos);
  CHECK(p.accepts(DType::F32));
  CHECK(p.accepts(DType::BF16));  // widened exactly
  CHECK_FALSE(p.accepts(DType::F16));
  const Param b(DType::BF16, Shape{4});
  CHECK(b.accepts(DType::BF16));
  CHECK_FALSE(b.accepts(DType::F32));  // never narrowed
  const Param e(DType::F8_E4M3, Shape{4});
  CHECK(e.bytes() == 4);
  CHECK_FALSE(e.accepts(DType::BF16));
}

TEST_CASE("Parameter: conversion from BF16, filling per dtype, borrowing and release") {
  Param p(DType::F32, Shape{3});
  const bf16 src[3] = {bf16(1.5f), bf16(-0.333984375f), bf16(1e-3f)};
  // an unaligned source: one byte into a buffer
  unsigned char raw[7];
  std::memcpy(raw + 1, src, 6);
  p.convert_from_host(raw + 1, DType::BF16);
  REQUIRE(p.loaded());
  for (int i = 0; i < 3; ++i) CHECK(p.as<float>()[i] == static_cast<float>(src[i]));
  Param q(DType::F32, Shape{3});
  CHECK(std::string(error_of([&] { q.convert_from_host(raw, DType::F16); }, ErrorKind::invalid_file))
            .find("cannot convert F16 into a F32 parameter") != std::string::npos);
  CHECK_FALSE(q.loaded());

  Param f8(DType::F8_E4M3, Shape{4}), h(DType::BF16, Shape{2});
  const float vals[4] = {1.0f, -448.0f, 1000.0f, 0.1f};
  f8.fill_host([&](std::size_t i) { return vals[i]; });
  const auto* codes = f8.as<std::uint8_t>();
  CHECK(codes[0] == 0x38);
  CHECK(codes[1] == 0xFE);
  CHECK(codes[2] == 0x7E);  // saturated
  CHECK(dsv32::decode_e4m3(codes[3]) == 0.1015625f);
  h.fill_host([](std::size_t i) { return i ? 0.1f : 3.0f; });
  CHECK(static_cast<float>(h.as<bf16>()[1]) == 0.10009765625f);

  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{4, 5, 6});
  const std::weak_ptr<std::vector<float>> watch = owner;
  Param r(DType::F32, Shape{3});
  r.borrow(owner->data(), owner);
  owner.reset();
  CHECK(r.borrowed());
  CHECK(r.loaded());
  CHECK(r.as<float>()[2] == 6.0f);
  CHECK_FALSE(watch.expired());
  r.release();
  CHECK(watch.expired());
  CHECK_FALSE(r.loaded());
  CHECK_FALSE(r.borrowed());
  r.allocate();
  CHECK(r.as<float>()[0] == 0.0f);  // fresh, zero-filled
}

TEST_CASE("Linear: binds its weight (and FP8 scale) by name; forward passes the activation scale format") {
  dsv32::ParameterStore<Cpu> store({spec("x", "weight", DType::BF16, Shape{40, 96}),
                                    spec("y", "weight", DType::F8_E4M3, Shape{300, 256}),
                                    spec("y", "scale", DType::F32, Shape{3, 2}, dsv32::TensorRole::scale),
                                    spec("z", "weight", DType::F8_E4M3, Shape{300, 256}),
                                    spec("z", "scale", DType::F32, Shape{3, 2}, dsv32::TensorRole::scale)});
  const dsv32::Linear<Cpu> bf(store, "x");
  CHECK(bf.in_features() == 96);
  CHECK(bf.out_features() == 40);
  CHECK_FALSE(bf.fp8());
  const dsv32::Linear<Cpu> ue(store, "y", ScaleFmt::ue8m0), plain(store, "z", ScaleFmt::none);
  CHECK(ue.fp8());
  CHECK_NOTHROW(store.check_all_used());
  CHECK(error_of([&] { dsv32::Linear<Cpu>(store, "w"); }, ErrorKind::state).find("w.weight, which the tensor table does not declare") !=
        std::string::npos);
  CHECK(error_of([&] { dsv32::Linear<Cpu>(store, "x"); store.check_all_used(); }, ErrorKind::state)
            .find("tensor x.weight of the tensor table is read by 2 layers") != std::string::npos);

  Call call;
  std::vector<bf16> x(2 * 256, bf16(0.3f)), y(2 * 300);
  x[5] = bf16(2.9f);  // amax / 448 not a power of two: the two formats quantize differently
  CHECK(error_of([&] { ue.forward(call.ctx, {x.data(), 2, 256, 256}, {y.data(), 2, 300, 300}); }, ErrorKind::state).find("not loaded") !=
        std::string::npos);
  std::mt19937 gen(1);
  std::normal_distribution<float> d(0.0f, 100.0f);
  std::vector<float> wv(300 * 256);
  for (auto& v : wv) v = d(gen);
  fill(store, [&](const std::string& name, std::size_t i) { return name.ends_with("scale") ? 0.01f : wv[i % wv.size()]; });
  const dsv32::WeightView<> v = ue.view();
  CHECK(v.dtype == DType::F8_E4M3);
  CHECK(v.out == 300);
  CHECK(v.in == 256);
  CHECK(v.scale != nullptr);
  CHECK(v.scale_cols() == 2);
  std::vector<bf16> y_plain(2 * 300), want(2 * 300), want_plain(2 * 300);
  ue.forward(call.ctx, {x.data(), 2, 256, 256}, {y.data(), 2, 300, 300});
  plain.forward(call.ctx, {x.data(), 2, 256, 256}, {y_plain.data(), 2, 300, 300});
  dsv32::cpu::linear({x.data(), 2, 256, 256}, ue.view(), ScaleFmt::ue8m0, {want.data(), 2, 300, 300});
  dsv32::cpu::linear({x.data(), 2, 256, 256}, plain.view(), ScaleFmt::none, {want_plain.data(), 2, 300, 300});
  int differ = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    CHECK(static_cast<float>(y[i]) == static_cast<float>(want[i]));
    CHECK(static_cast<float>(y_plain[i]) == static_cast<float>(want_plain[i]));
    differ += static_cast<float>(y[i]) != static_cast<float>(y_plain[i]);
  }
  CHECK(differ > 0);
}

TEST_CASE("RMSNorm and LayerNorm layers: eps 1e-6, bound by name") {
  const std::int64_t dim = 8;
  dsv32::ParameterStore<Cpu> store({spec("norm", "weight", DType::F32, Shape{dim}, dsv32::TensorRole::norm),
                                    spec("k_norm", "weight", DType::F32, Shape{dim}, dsv32::TensorRole::norm),
                                    spec("k_norm", "bias", DType::F32, Shape{dim}, dsv32::TensorRole::bias)});
  const dsv32::RMSNorm<Cpu> rms(store, "norm");
  const dsv32::LayerNorm<Cpu> ln(store, "k_norm");
  CHECK_NOTHROW(store.check_all_used());
  fill(store, [](const std::string& n, std::size_t i) { return n.ends_with("bias") ? 0.0f : 1.0f + 0.125f * static_cast<float>(i); });
  Call call;
  // a constant row of c = 2^-10: c^2 = 2^-20 ~ 0.95e-6, so the eps of 1e-6 shows: y = w c / sqrt(c^2 + 1e-6)
  const float c = std::ldexp(1.0f, -10);
  std::vector<bf16> x(dim, bf16(c)), y(dim);
  rms.forward(call.ctx, {x.data(), 1, dim, dim}, {y.data(), 1, dim, dim});
  const double ratio = c / std::sqrt(static_cast<double>(c) * c + 1e-6);  // 0.6985...
  for (std::int64_t i = 0; i < dim; ++i) CHECK(static_cast<float>(y[i]) == doctest::Approx((1.0 + 0.125 * i) * ratio).epsilon(4e-3));
  // fused residual form through the layer: residual becomes bf16(x + r)
  std::vector<bf16> r(dim, bf16(c)), y2(dim);
  rms.forward(call.ctx, {x.data(), 1, dim, dim}, {r.data(), 1, dim, dim}, {y2.data(), 1, dim, dim});
  for (std::int64_t i = 0; i < dim; ++i) CHECK(static_cast<float>(r[i]) == 2 * c);
  const double ratio2 = 2 * c / std::sqrt(4.0 * c * c + 1e-6);
  for (std::int64_t i = 0; i < dim; ++i) CHECK(static_cast<float>(y2[i]) == doctest::Approx((1.0 + 0.125 * i) * ratio2).epsilon(4e-3));
  // LayerNorm of [0, 2^-10, 0, 2^-10, ...]: mean 2^-11, variance 2^-22 (~0.24e-6): y = +-w sqrt(v / (v + 1e-6))
  for (std::int64_t i = 0; i < dim; ++i) x[i] = bf16(i % 2 ? c : 0.0f);
  ln.forward(call.ctx, {x.data(), 1, dim, dim}, {y.data(), 1, dim, dim});
  const double v = std::ldexp(1.0, -22), z = std::sqrt(v / (v + 1e-6));
  for (std::int64_t i = 0; i < dim; ++i)
    CHECK(static_cast<float>(y[i]) == doctest::Approx((i % 2 ? 1 : -1) * (1.0 + 0.125 * i) * z).epsilon(4e-3));
}

TEST_CASE("Embedding layer: the rank's vocabulary part, from the tensor table") {
  dsv32::ModelArgs a = dsv32::ModelArgs::of<dsv32::TinyBf16>();
  a.vocab_size = 6;
  a.dim = 2;
  a.n_heads = 2;  // divisible by the world size used below, like every other split size
  a.n_routed_experts = 8;
  // rank 1 of 2 holds ids [3, 6): its parameter is [3, dim]
  dsv32::ParameterStore<Cpu> part(a, 2, 1);
  const Param* embed = part.find("embed.weight");
  REQUIRE(embed != nullptr);
  CHECK(embed->shape() == Shape{3, 2});
  CHECK(embed->spec().shape == Shape{6, 2});
  dsv32::ParameterStore<Cpu> whole({spec("embed", "weight", DType::BF16, Shape{6, 2}, dsv32::TensorRole::embedding)});
  const dsv32::Embedding<Cpu> layer(whole, "embed", 0);
  fill(whole, [](const std::string&, std::size_t i) { return static_cast<float>(i); });
  const std::int32_t tokens[] = {5, 0, 2};
  std::vector<bf16> out(3 * 2);
  Call call;
  layer.forward(call.ctx, {tokens, 3}, {out.data(), 3, 2, 2});
  const float want[] = {10, 11, 0, 1, 4, 5};
  for (int i = 0; i < 6; ++i) CHECK(static_cast<float>(out[i]) == want[i]);
  a.vocab_size = 7;  // 7 % 2 != 0
  CHECK(contains(error_of([&] { dsv32::ParameterStore<Cpu>(a, 2, 0); }, ErrorKind::invalid_argument),
                 "vocab_size (7) must be divisible by the world size (2)"));
}
