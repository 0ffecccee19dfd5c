// Layer-level tests against the golden generator's independent oracle: MLA (with its indexer), MoE
// and Block of tiny_bf16 and tiny_fp8_ue8m0_yarn, each run on its own on the oracle's inputs of three
// calls — a prefill of positions [0, 4), a prefill of [4, 6) (start_pos > 0, keys expanded from the
// cache) and a decode step at 6 — two sequences each, the layer's caches carried from call to call.
// Expected: tests/data/layers/<scenario>.safetensors (tests/data/layers/README.md: the oracle's
// command). Every output is asserted bit-identical (the oracle reproduces the reference's rounding,
// and so do these layers on these inputs), the indexer's picks and the experts as sets; only the gate
// weights (f32) carry a tolerance of a few ulps, because the reference's f32 gate scores are a matmul
// whose summation order is torch's (see tests/golden/test_golden.cpp).
#include <doctest/doctest.h>

#include <dsv32/dsv32.hpp>
#include <dsv32/testing/golden.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "support/bit_diff.hpp"
#include "support/test_support.hpp"

namespace {

using dsv32::bf16;
using dsv32::Cpu;
using dsv32::test::bit_diff;
using dsv32::test::BitDiff;
using dsv32::test::kGoldenDir;
using dsv32::test::ulps;

constexpr std::int64_t kGateWeightUlps = 4;  // as tests/golden: the f32 gate scores' summation order

// A scenario's golden weights in a stand-alone ParameterStore (layers built from it bind by name),
// its runtime options, the oracle's per-layer data, and what one pass needs: caches (a page of
// max_seq_len positions per sequence, sequence b in page b), scratch, RoPE table.
template <class Config>
struct OracleLayers {
  std::string scenario;
  dsv32::ModelArgs args = dsv32::ModelArgs::of<Config>();
  dsv32::RuntimeOptions runtime;
  dsv32::ParameterStore<Cpu> store{dsv32::ModelArgs::of<Config>(), 1, 0};
  std::shared_ptr<const dsv32::SafetensorsFile> data;
  dsv32::KvCache<Cpu> cache;
  dsv32::RopeTable<Cpu> rope;
  dsv32::ExecutionContext<Cpu> exec;
  dsv32::Tensor<float, Cpu> reduce;
  dsv32::BlockScratch<Cpu> scratch;

  explicit OracleLayers(const std::string& name) : scenario(name) {
    const std::filesystem::path dir = kGoldenDir + name;
    runtime = dsv32::ModelArgs::from_file(dir / "config.json").runtime;
    const auto weights = dsv32::SafetensorsFile::open(dir / "model0-mp1.safetensors");
    for (dsv32::Parameter<Cpu>& p : store) {
      const dsv32::TensorInfo& t = weights->at(p.name());
      REQUIRE(t.numel() == p.numel());
      p.convert_from_host(t.data, t.dtype);
    }
    data = dsv32::SafetensorsFile::open(std::string(DSV32_TEST_DATA) + "/layers/" + name + ".safetensors");
    cache = dsv32::KvCache<Cpu>(args, runtime.max_batch_size, runtime.max_seq_len);
    rope = dsv32::RopeTable<Cpu>(Config::qk_rope_head_dim, runtime);
    dsv32::ForwardLimits limits{runtime.max_batch_size, runtime.max_seq_len, runtime.max_seq_len, 1,
                                runtime.absorbed_prefill_from, 0, 0};
    scratch.reserve([]<class Buffer>(Buffer& b, std::int64_t n) {
      if constexpr (requires { b.mat(); })
        b.reserve(static_cast<std::size_t>(n));
      else if (b.size() < static_cast<std::size_t>(n))
        b.reset(static_cast<std::size_t>(n));
    }, args, limits);
  }

  bool has(const std::string& key) const { return data->find(key) != nullptr; }
  std::vector<float> f32(const std::string& key) const { return dsv32::testing::detail::read_f32(*data, key); }
  std::vector<std::int64_t> i64(const std::string& key) const { return dsv32::testing::detail::read_i64(*data, key); }
  dsv32::Tensor<bf16, Cpu> activation(const std::string& key) const {
    const dsv32::TensorInfo& t = data->at(key);
    REQUIRE(t.dtype == dsv32::DType::BF16);
    REQUIRE(t.numel() % Config::dim == 0);
    dsv32::Tensor<bf16, Cpu> m(dsv32::Shape{t.numel() / Config::dim, Config::dim});
    t.copy_to(m.data());
    return m;
  }
};

// The pass of call `c`: `batch` sequences of `seq` tokens from start_pos, sequence b in page b; a
// prefill (seq > 1) attends through expanded keys (as Transformer::forward's prefills below
// absorbed_prefill_from), a decode step in the latent space.
struct Pass {
  std::int64_t batch = 0, seq = 0, start = 0;
  std::vector<dsv32::PassSequence> sequences;
  std::vector<std::int32_t> table, sequence, position, slots;

  template <class Config>
  Pass(const OracleLayers<Config>& o, int c) {
    const std::string call = "call" + std::to_string(c) + ".";
    const dsv32::TensorInfo& tokens = o.data->at(call + "tokens");
    batch = tokens.shape[0];
    seq = tokens.shape[1];
    start = o.i64(call + "start_pos").at(0);
    const std::int64_t P = o.runtime.max_seq_len;
    for (std::int64_t b = 0; b < batch; ++b) {
      dsv32::PassSequence ps;
      ps.row = b * seq;
      ps.tokens = seq;
      ps.start_pos = start;
      ps.expanded = seq > 1 ? seq : 0;
      ps.first_page = b;
      sequences.push_back(ps);
      table.push_back(static_cast<std::int32_t>(b));
      for (std::int64_t i = 0; i < seq; ++i) {
        sequence.push_back(static_cast<std::int32_t>(b));
        position.push_back(static_cast<std::int32_t>(start + i));
        slots.push_back(static_cast<std::int32_t>(b * P + start + i));
      }
    }
  }
  Pass(const Pass&) = delete;  // the context points into the vectors

  template <class Config>
  dsv32::ForwardContext<Cpu> context(OracleLayers<Config>& o, int layer, dsv32::ForwardObserver* observer) const {
    dsv32::ForwardContext<Cpu> ctx;
    ctx.sequences = sequences;
    ctx.rows = batch * seq;
    ctx.cache = &o.cache;
    ctx.pages = dsv32::CachePages<dsv32::Host>{
        dsv32::MatrixView<const std::int32_t>(table.data(), batch, 1, 1),
        dsv32::VectorView<const std::int32_t>(sequence.data(), ctx.rows),
        dsv32::VectorView<const std::int32_t>(position.data(), ctx.rows), o.runtime.max_seq_len, start + seq};
    ctx.slots = dsv32::VectorView<const std::int32_t>(slots.data(), ctx.rows);
    ctx.layer = layer;
    ctx.observer = observer;
    ctx.exec = &o.exec;
    ctx.reduce = &o.reduce;
    return ctx;
  }
};

std::vector<float> floats(const dsv32::Tensor<bf16, Cpu>& t) {
  std::vector<float> v(static_cast<std::size_t>(t.shape().numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(t.data()[i]);
  return v;
}

// ours against the oracle's `key`, bit for bit
template <class Config>
void check_exact(const OracleLayers<Config>& o, const dsv32::Tensor<bf16, Cpu>& ours, const std::string& key) {
  const BitDiff d = bit_diff(floats(ours), o.f32(key));
  CHECK_MESSAGE(d.identical(), d.describe(o.scenario + " " + key));
}

// The indexer's picks of every query of the call (visible positions, as sets) against the oracle's.
template <class Config>
void check_topk(const OracleLayers<Config>& o, const Pass& pass, const dsv32::testing::detail::Recorder& rec,
                int layer, const std::string& key) {
  const auto ref = o.i64(key);
  const std::int64_t k = o.data->at(key).shape[2];
  const auto reported = rec.topk.find(layer);
  REQUIRE(reported != rec.topk.end());
  for (std::int64_t b = 0; b < pass.batch; ++b)
    for (std::int64_t s = 0; s < pass.seq; ++s) {
      CAPTURE(b);
      CAPTURE(s);
      const std::int64_t visible = pass.start + s + 1;
      std::set<std::int64_t> want, got;
      for (std::int64_t j = 0; j < k; ++j)
        if (const std::int64_t p = ref[(b * pass.seq + s) * k + j]; p >= 0 && p < visible) want.insert(p);
      const auto q = reported->second.find({b, s});
      REQUIRE(q != reported->second.end());
      got.insert(q->second.begin(), q->second.end());
      CHECK_MESSAGE(want == got, o.scenario, " ", key, ": the indexer's picks differ");
      CHECK(static_cast<std::int64_t>(want.size()) == std::min<std::int64_t>(visible, Config::index_topk));
    }
}

// The routing of every token of the call: the same experts, weights within kGateWeightUlps.
template <class Config>
void check_gate(const OracleLayers<Config>& o, const dsv32::testing::detail::Recorder& rec, int layer,
                const std::string& prefix) {
  const auto ref_e = o.i64(prefix + "gate_indices");
  const auto ref_w = o.f32(prefix + "gate_weights");
  REQUIRE(rec.gate_weights.count(layer));
  const auto& ours_w = rec.gate_weights.at(layer);
  const auto& ours_e = rec.gate_experts.at(layer);
  const std::size_t k = Config::n_activated_experts;
  REQUIRE(ours_e.size() == ref_e.size());
  std::int64_t worst = 0;
  for (std::size_t r = 0; r < ours_e.size() / k; ++r) {
    std::map<std::int64_t, float> want, got;
    for (std::size_t j = 0; j < k; ++j) {
      want[ref_e[r * k + j]] = ref_w[r * k + j];
      got[ours_e[r * k + j]] = ours_w[r * k + j];
    }
    CAPTURE(r);
    REQUIRE(want.size() == k);
    for (const auto& entry : want) {  // no structured binding: clang 14 cannot capture one
      const std::int64_t e = entry.first;
      const float w = entry.second;
      REQUIRE_MESSAGE(got.count(e), o.scenario, " ", prefix, ": expert ", e, " not chosen");
      worst = std::max(worst, ulps(got[e], w));
    }
  }
  CHECK_MESSAGE(worst <= kGateWeightUlps, o.scenario, " ", prefix, "gate_weights: ", worst, " ulps apart");
}

constexpr int kCalls = 3;

template <class Config>
void check_mla(const std::string& scenario) {
  OracleLayers<Config> o(scenario);
  for (int layer = 0; layer < Config::n_layers; ++layer) {
    CAPTURE(layer);
    dsv32::MLA<Config, Cpu> mla(o.store, "layers." + std::to_string(layer) + ".attn", o.runtime);
    for (int c = 0; c < kCalls; ++c) {
      CAPTURE(c);
      const std::string prefix = "call" + std::to_string(c) + ".layers." + std::to_string(layer) + ".";
      const Pass pass(o, c);
      dsv32::testing::detail::Recorder rec;
      const auto ctx = pass.context(o, layer, &rec);
      const auto x = o.activation(prefix + "attn_in");
      dsv32::Tensor<bf16, Cpu> out(dsv32::Shape{x.shape().rows(), Config::dim});
      mla.forward(ctx, x.mat(), o.rope, o.scratch.mla, out.mat());
      check_exact(o, out, prefix + "attn_out");
      check_topk(o, pass, rec, layer, prefix + "topk");
    }
  }
}

template <class Config>
void check_moe(const std::string& scenario) {
  OracleLayers<Config> o(scenario);
  int layers = 0;
  for (int layer = Config::n_dense_layers; layer < Config::n_layers; ++layer, ++layers) {
    CAPTURE(layer);
    dsv32::MoE<Config, Cpu> moe(o.store, "layers." + std::to_string(layer) + ".ffn", dsv32::Parallel{});
    moe.prepare_experts();
    for (int c = 0; c < kCalls; ++c) {
      CAPTURE(c);
      const std::string prefix = "call" + std::to_string(c) + ".layers." + std::to_string(layer) + ".";
      const Pass pass(o, c);
      dsv32::testing::detail::Recorder rec;
      rec.prefill_details = true;  // records the routing of any call
      const auto ctx = pass.context(o, layer, &rec);
      const auto x = o.activation(prefix + "ffn_in");
      dsv32::Tensor<bf16, Cpu> out(dsv32::Shape{x.shape().rows(), Config::dim});
      moe.forward(ctx, x.mat(), o.scratch.moe, out.mat());
      check_exact(o, out, prefix + "x");
      check_gate(o, rec, layer, prefix);
    }
  }
  CHECK(layers == 2);
}

template <class Config>
void check_block(const std::string& scenario) {
  OracleLayers<Config> o(scenario);
  for (int layer = 0; layer < Config::n_layers; ++layer) {
    CAPTURE(layer);
    dsv32::Block<Config, Cpu> block(o.store, layer, o.runtime, dsv32::Parallel{});
    block.prepare();
    CHECK(block.is_moe() == (layer >= Config::n_dense_layers));
    for (int c = 0; c < kCalls; ++c) {
      CAPTURE(c);
      const std::string prefix = "call" + std::to_string(c) + ".layers." + std::to_string(layer) + ".";
      const Pass pass(o, c);
      const auto ctx0 = pass.context(o, layer, nullptr);
      auto ctx = ctx0;
      auto h = o.activation(prefix + "h_in");
      const bool first = layer == 0;
      REQUIRE(o.has(prefix + "res_in") == !first);
      auto residual = first ? dsv32::Tensor<bf16, Cpu>(dsv32::Shape{h.shape().rows(), Config::dim}) : o.activation(prefix + "res_in");
      block.forward(ctx, h.mat(), residual.mat(), first, o.rope, o.scratch);
      check_exact(o, h, prefix + "x");
      check_exact(o, residual, prefix + "residual");
    }
  }
}

}  // namespace

TEST_CASE("MLA with its indexer, each layer on the oracle's inputs: prefill, prefill at start_pos 4, decode: bit-identical") {
  check_mla<dsv32::TinyBf16>("tiny_bf16");
  check_mla<dsv32::TinyFp8Ue8m0Yarn>("tiny_fp8_ue8m0_yarn");
}

TEST_CASE("MoE, each MoE layer on the oracle's inputs: outputs bit-identical, the same experts, weights within 4 ulps") {
  check_moe<dsv32::TinyBf16>("tiny_bf16");
  check_moe<dsv32::TinyFp8Ue8m0Yarn>("tiny_fp8_ue8m0_yarn");
}

TEST_CASE("Block, each layer on the oracle's inputs: prefill, prefill at start_pos 4, decode: outputs and residual bit-identical") {
  check_block<dsv32::TinyBf16>("tiny_bf16");
  check_block<dsv32::TinyFp8Ue8m0Yarn>("tiny_fp8_ue8m0_yarn");
}
