// Tests of dsv32/layers/parameter.hpp and linear.hpp: a Parameter's dtype rules, conversion, filling,
// borrowing and release; the Linear, RMSNorm, LayerNorm and Embedding layers' tensor names, shapes,
// default eps and their use of the kernels.
#include "dsv32/backend/cpu/kernels.hpp"
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

using dsv32::test::error_of;

namespace {

using dsv32::bf16;
using dsv32::Cpu;
using dsv32::DType;
using dsv32::ErrorKind;
using dsv32::ScaleFmt;
using dsv32::Shape;
using Param = dsv32::Parameter<Cpu>;


// Loads every parameter of a layer with values from gen(name, index).
template <class Layer, class Gen>
void fill(Layer& layer, Gen&& gen) {
  layer.visit("", [&](const std::string& name, Param& p) { p.fill_host([&](std::size_t i) { return gen(name, i); }); });
}

}  // namespace

TEST_CASE("Parameter: shape and bytes before loading, the dtypes it accepts, data() refused until bound") {
  Param p(DType::F32, Shape{2, 3});
  CHECK(p.numel() == 6);
  CHECK(p.bytes() == 24);
  CHECK_FALSE(p.loaded());
  CHECK_FALSE(p.borrowed());
  CHECK(std::string(error_of([&] { (void)p.data(); }, ErrorKind::state)).find("parameter not loaded") != std::string::npos);
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

TEST_CASE("Linear: names, shapes and scale shapes; forward passes the activation scale format") {
  dsv32::Linear<Cpu> bf(96, 40, DType::BF16);
  std::vector<std::string> names;
  bf.visit("x.", [&](const std::string& n, Param& p) {
    names.push_back(n);
    CHECK(p.shape() == Shape{40, 96});
  });
  CHECK(names == std::vector<std::string>{"x.weight"});
  CHECK(bf.in_features() == 96);
  CHECK(bf.out_features() == 40);
  CHECK_FALSE(bf.fp8());

  dsv32::Linear<Cpu> ue(256, 300, DType::F8_E4M3, ScaleFmt::ue8m0), plain(256, 300, DType::F8_E4M3, ScaleFmt::none);
  names.clear();
  ue.visit("y.", [&](const std::string& n, Param& p) {
    names.push_back(n);
    CHECK(p.shape() == (n == "y.weight" ? Shape{300, 256} : Shape{3, 2}));
    CHECK(p.dtype() == (n == "y.weight" ? DType::F8_E4M3 : DType::F32));
  });
  CHECK(names == std::vector<std::string>{"y.weight", "y.scale"});
  CHECK(ue.fp8());

  const dsv32::ForwardContext ctx;
  std::vector<bf16> x(2 * 256, bf16(0.3f)), y(2 * 300);
  x[5] = bf16(2.9f);  // amax / 448 not a power of two: the two formats quantize differently
  CHECK(error_of([&] { ue.forward(ctx, {x.data(), 2, 256, 256}, {y.data(), 2, 300, 300}); }, ErrorKind::state).find("not loaded") !=
        std::string::npos);
  std::mt19937 gen(1);
  std::normal_distribution<float> d(0.0f, 100.0f);
  std::vector<float> wv(300 * 256);
  for (auto& v : wv) v = d(gen);
  auto weights = [&](const std::string& name, std::size_t i) { return name.ends_with("scale") ? 0.01f : wv[i]; };
  fill(ue, weights);
  fill(plain, weights);
  const dsv32::WeightView v = ue.view();
  CHECK(v.dtype == DType::F8_E4M3);
  CHECK(v.out == 300);
  CHECK(v.in == 256);
  CHECK(v.scale != nullptr);
  CHECK(v.scale_cols() == 2);
  std::vector<bf16> y_plain(2 * 300), want(2 * 300), want_plain(2 * 300);
  ue.forward(ctx, {x.data(), 2, 256, 256}, {y.data(), 2, 300, 300});
  plain.forward(ctx, {x.data(), 2, 256, 256}, {y_plain.data(), 2, 300, 300});
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

TEST_CASE("RMSNorm and LayerNorm layers: eps 1e-6, names") {
  const std::int64_t dim = 8;
  dsv32::RMSNorm<Cpu> rms(dim);
  dsv32::LayerNorm<Cpu> ln(dim);
  std::vector<std::string> names;
  ln.visit("k_norm.", [&](const std::string& n, Param& p) {
    names.push_back(n);
    CHECK(p.dtype() == DType::F32);
    CHECK(p.shape() == Shape{dim});
  });
  CHECK(names == std::vector<std::string>{"k_norm.weight", "k_norm.bias"});
  fill(rms, [](const std::string&, std::size_t i) { return 1.0f + 0.125f * static_cast<float>(i); });
  fill(ln, [](const std::string& n, std::size_t i) { return n.ends_with("bias") ? 0.0f : 1.0f + 0.125f * static_cast<float>(i); });
  // a constant row of c = 2^-10: c^2 = 2^-20 ~ 0.95e-6, so the eps of 1e-6 shows: y = w c / sqrt(c^2 + 1e-6)
  const float c = std::ldexp(1.0f, -10);
  std::vector<bf16> x(dim, bf16(c)), y(dim);
  rms.forward({x.data(), 1, dim, dim}, {y.data(), 1, dim, dim});
  const double ratio = c / std::sqrt(static_cast<double>(c) * c + 1e-6);  // 0.6985...
  for (std::int64_t i = 0; i < dim; ++i) CHECK(static_cast<float>(y[i]) == doctest::Approx((1.0 + 0.125 * i) * ratio).epsilon(4e-3));
  // fused residual form through the layer: residual becomes bf16(x + r)
  std::vector<bf16> r(dim, bf16(c)), y2(dim);
  rms.forward({x.data(), 1, dim, dim}, {r.data(), 1, dim, dim}, {y2.data(), 1, dim, dim});
  for (std::int64_t i = 0; i < dim; ++i) CHECK(static_cast<float>(r[i]) == 2 * c);
  const double ratio2 = 2 * c / std::sqrt(4.0 * c * c + 1e-6);
  for (std::int64_t i = 0; i < dim; ++i) CHECK(static_cast<float>(y2[i]) == doctest::Approx((1.0 + 0.125 * i) * ratio2).epsilon(4e-3));
  // LayerNorm of [0, 2^-10, 0, 2^-10, ...]: mean 2^-11, variance 2^-22 (~0.24e-6): y = +-w sqrt(v / (v + 1e-6))
  for (std::int64_t i = 0; i < dim; ++i) x[i] = bf16(i % 2 ? c : 0.0f);
  ln.forward({x.data(), 1, dim, dim}, {y.data(), 1, dim, dim});
  const double v = std::ldexp(1.0, -22), z = std::sqrt(v / (v + 1e-6));
  for (std::int64_t i = 0; i < dim; ++i)
    CHECK(static_cast<float>(y[i]) == doctest::Approx((i % 2 ? 1 : -1) * (1.0 + 0.125 * i) * z).epsilon(4e-3));
}

TEST_CASE("Embedding layer: the rank's vocabulary part") {
  dsv32::Embedding<Cpu> whole(6, 2, dsv32::Parallel{});
  fill(whole, [](const std::string&, std::size_t i) { return static_cast<float>(i); });
  const std::int32_t tokens[] = {5, 0, 2};
  std::vector<bf16> out(3 * 2);
  whole.forward(dsv32::ForwardContext{}, tokens, 3, {out.data(), 3, 2, 2});
  const float want[] = {10, 11, 0, 1, 4, 5};
  for (int i = 0; i < 6; ++i) CHECK(static_cast<float>(out[i]) == want[i]);
  // rank 1 of 3 holds ids [2, 4): its parameter is [2, dim]
  dsv32::Embedding<Cpu> part(6, 2, dsv32::Parallel{3, 1, nullptr});
  part.visit("embed.", [](const std::string& n, Param& p) {
    CHECK(n == "embed.weight");
    CHECK(p.shape() == Shape{2, 2});
  });
  CHECK_THROWS_AS(dsv32::Embedding<Cpu>(7, 2, dsv32::Parallel{3, 0, nullptr}), dsv32::Error);  // 7 % 3 != 0
}
