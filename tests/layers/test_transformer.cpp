// Tests of dsv32/layers/transformer.hpp: the tensor list (names, dtypes, shapes, FP8 scales) against
// the architecture and the reference's checkpoints, the 671B model's memory plan computed without
// allocating anything, forward()'s input validation (errors leave the caches untouched), logits at
// every position, chunked prefill, and init_random's determinism.
#include "dsv32/backend/cpu/kernels.hpp"
#include "dsv32/config/presets.hpp"
#include "dsv32/io/safetensors.hpp"
#include "dsv32/layers/transformer.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>
#include "support/test_support.hpp"

using dsv32::test::error_of;
using dsv32::test::contains;

namespace {

using dsv32::Config671B;
using dsv32::Cpu;
using dsv32::DType;
using dsv32::ErrorKind;
using dsv32::Shape;
using dsv32::TinyBf16;
using Param = dsv32::Parameter<Cpu>;

using dsv32::test::kGoldenDir;


std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

dsv32::RuntimeOptions tiny_options() {
  dsv32::RuntimeOptions o;
  o.max_batch_size = 2;
  o.max_seq_len = 24;
  return o;
}

std::vector<std::int32_t> random_tokens(std::size_t n, unsigned seed, std::int32_t vocab = TinyBf16::vocab_size) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int32_t> d(0, vocab - 1);
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = d(gen);
  return t;
}

// Rows [first, first + count) of every sequence of a [batch, seq] token matrix.
std::vector<std::int32_t> columns(const std::vector<std::int32_t>& tokens, std::int64_t batch, std::int64_t first,
                                  std::int64_t count) {
  const std::int64_t seq = static_cast<std::int64_t>(tokens.size()) / batch;
  std::vector<std::int32_t> out;
  for (std::int64_t b = 0; b < batch; ++b)
    out.insert(out.end(), tokens.begin() + b * seq + first, tokens.begin() + b * seq + first + count);
  return out;
}

double max_abs(const std::vector<float>& v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

struct Entry {
  DType dtype;
  Shape shape;
};
template <class Model>
std::map<std::string, Entry> entry_map(Model& m) {
  std::map<std::string, Entry> out;
  for (const auto& e : m.tensors()) out[e.name] = {e.dtype, e.shape};
  return out;
}

}  // namespace

TEST_CASE("Transformer<TinyBf16>: the tensor list, one layer of each kind, against the architecture") {
  dsv32::Transformer<TinyBf16> model(tiny_options());
  const auto list = model.tensors();
  // embed + dense layer 17 + 2 MoE layers of 43 (gate weight and bias, 8 x 3 experts, 3 shared) + norm + head
  CHECK(list.size() == 1 + 17 + 2 * 43 + 2);
  CHECK(list.front().name == "embed.weight");
  CHECK(list.back().name == "head.weight");
  const auto m = entry_map(model);
  CHECK(m.size() == list.size());  // names are unique

  struct Want {
    const char* name;
    DType dtype;
    Shape shape;
  };
  const Want wants[] = {
      {"embed.weight", DType::BF16, Shape{300, 96}},
      {"layers.0.attn.wq_a.weight", DType::BF16, Shape{64, 96}},
      {"layers.0.attn.q_norm.weight", DType::F32, Shape{64}},
      {"layers.0.attn.wq_b.weight", DType::BF16, Shape{3 * 24, 64}},
      {"layers.0.attn.wkv_a.weight", DType::BF16, Shape{32 + 8, 96}},
      {"layers.0.attn.kv_norm.weight", DType::F32, Shape{32}},
      {"layers.0.attn.wkv_b.weight", DType::BF16, Shape{3 * (16 + 24), 32}},
      {"layers.0.attn.wo.weight", DType::BF16, Shape{96, 3 * 24}},
      {"layers.0.attn.indexer.wq_b.weight", DType::BF16, Shape{8 * 128, 64}},
      {"layers.0.attn.indexer.wk.weight", DType::BF16, Shape{128, 96}},
      {"layers.0.attn.indexer.k_norm.weight", DType::F32, Shape{128}},
      {"layers.0.attn.indexer.k_norm.bias", DType::F32, Shape{128}},
      {"layers.0.attn.indexer.weights_proj.weight", DType::BF16, Shape{8, 96}},
      {"layers.0.ffn.w1.weight", DType::BF16, Shape{160, 96}},
      {"layers.0.ffn.w2.weight", DType::BF16, Shape{96, 160}},
      {"layers.0.ffn.w3.weight", DType::BF16, Shape{160, 96}},
      {"layers.0.attn_norm.weight", DType::F32, Shape{96}},
      {"layers.0.ffn_norm.weight", DType::F32, Shape{96}},
      {"layers.1.ffn.gate.weight", DType::BF16, Shape{8, 96}},
      {"layers.1.ffn.gate.bias", DType::F32, Shape{8}},
      {"layers.1.ffn.experts.0.w1.weight", DType::BF16, Shape{48, 96}},
      {"layers.1.ffn.experts.7.w2.weight", DType::BF16, Shape{96, 48}},
      {"layers.2.ffn.experts.7.w3.weight", DType::BF16, Shape{48, 96}},
      {"layers.1.ffn.shared_experts.w1.weight", DType::BF16, Shape{2 * 48, 96}},
      {"layers.1.ffn.shared_experts.w2.weight", DType::BF16, Shape{96, 2 * 48}},
      {"layers.2.attn.indexer.wq_b.weight", DType::BF16, Shape{8 * 128, 64}},
      {"norm.weight", DType::F32, Shape{96}},
      {"head.weight", DType::BF16, Shape{300, 96}},
  };
  for (const Want& w : wants) {
    CAPTURE(w.name);
    REQUIRE(m.count(w.name) == 1);
    CHECK(m.at(w.name).dtype == w.dtype);
    CHECK(m.at(w.name).shape == w.shape);
  }
  // the dense layer has no gate, the MoE layers no dense w1
  CHECK(m.count("layers.0.ffn.gate.weight") == 0);
  CHECK(m.count("layers.1.ffn.w1.weight") == 0);
  CHECK(m.count("layers.1.ffn.experts.8.w1.weight") == 0);
  CHECK(m.count("layers.0.attn.wq_a.scale") == 0);  // no scales in a bf16 model

  std::int64_t elements = 0;
  std::size_t bytes = 0;
  for (const auto& e : list) {
    elements += e.shape.numel();
    bytes += e.bytes;
    CHECK(e.bytes == static_cast<std::size_t>(e.shape.numel()) * dsv32::dtype_size(e.dtype));
  }
  CHECK(elements == dsv32::param_counts<TinyBf16>.total);
  CHECK(model.memory_plan().parameters == elements);
  CHECK(model.memory_plan().weights == bytes);

  // the reference's checkpoint of this shape has exactly these tensors and shapes (its norms are
  // BF16, which the F32 norm parameters accept)
  const auto file = dsv32::SafetensorsFile::open(kGoldenDir + "tiny_bf16/model0-mp1.safetensors");
  CHECK(file->tensors().size() == list.size());
  dsv32::Transformer<TinyBf16> probe(tiny_options());
  probe.visit([&](const std::string& name, Param& p) {
    CAPTURE(name);
    const auto* t = file->find(name);
    REQUIRE(t != nullptr);
    CHECK(t->shape == p.shape().dims());
    CHECK(p.accepts(t->dtype));
    CHECK_FALSE(p.loaded());
  });
}

TEST_CASE("Transformer<TinyFp8PlainScale>: FP8 weights list their .scale with shape [ceil(out/128), ceil(in/128)]") {
  dsv32::Transformer<dsv32::TinyFp8PlainScale> model(tiny_options());
  const auto list = model.tensors();
  // per layer: 5 FP8 MLA linears and 2 FP8 indexer linears with scales, q/kv norms, k_norm weight and
  // bias, weights_proj, 2 block norms = 21; dense FFN 3 x 2; MoE: gate (no bias) + 17 experts x 6
  CHECK(list.size() == 1 + (21 + 6) + 2 * (21 + 1 + 17 * 6) + 2);
  const auto m = entry_map(model);
  const std::pair<const char*, Shape> fp8[] = {
      {"layers.1.attn.wq_a", Shape{128, 256}},     {"layers.1.attn.wq_b", Shape{4 * 48, 128}},
      {"layers.1.attn.wkv_a", Shape{128 + 16, 256}}, {"layers.1.attn.wkv_b", Shape{4 * 64, 128}},
      {"layers.1.attn.wo", Shape{256, 4 * 32}},    {"layers.1.attn.indexer.wq_b", Shape{8 * 128, 128}},
      {"layers.1.attn.indexer.wk", Shape{128, 256}}, {"layers.0.ffn.w1", Shape{512, 256}},
      {"layers.0.ffn.w2", Shape{256, 512}},        {"layers.2.ffn.experts.15.w2", Shape{256, 128}},
      {"layers.2.ffn.shared_experts.w3", Shape{128, 256}},
  };
  for (const auto& entry : fp8) {
    const auto& prefix = entry.first;  // not structured bindings: CAPTURE's lambda takes them
    const auto& shape = entry.second;
    CAPTURE(prefix);
    const std::string w = std::string(prefix) + ".weight", s = std::string(prefix) + ".scale";
    REQUIRE(m.count(w) == 1);
    REQUIRE(m.count(s) == 1);
    CHECK(m.at(w).dtype == DType::F8_E4M3);
    CHECK(m.at(w).shape == shape);
    CHECK(m.at(s).dtype == DType::F32);
    CHECK(m.at(s).shape == Shape{(shape[0] + 127) / 128, (shape[1] + 127) / 128});
  }
  CHECK(m.at("layers.1.attn.wkv_a.scale").shape == Shape{2, 2});  // 144 rows: a partial row block
  // BF16 and F32 tensors carry no scale; no gate bias in this scenario
  for (const char* name : {"layers.1.attn.indexer.weights_proj", "layers.1.ffn.gate", "head", "embed"}) {
    CAPTURE(name);
    CHECK(m.count(std::string(name) + ".scale") == 0);
  }
  CHECK(m.count("layers.1.ffn.gate.bias") == 0);
  CHECK(dsv32::Transformer<dsv32::TinyFp8Ue8m0Yarn>(tiny_options()).tensors().size() == list.size() + 2);  // gate biases
  // every FP8 weight is followed by its scale, and the scales are the only extra tensors
  std::int64_t weights = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (list[i].dtype == DType::F8_E4M3) {
      REQUIRE(i + 1 < list.size());
      const std::string base = list[i].name.substr(0, list[i].name.size() - std::string("weight").size());
      CHECK(list[i + 1].name == base + "scale");
      CHECK(list[i + 1].shape == Shape{(list[i].shape[0] + 127) / 128, (list[i].shape[1] + 127) / 128});
    }
    if (!list[i].name.ends_with(".scale")) weights += list[i].shape.numel();
  }
  CHECK(weights == dsv32::param_counts<dsv32::TinyFp8PlainScale>.total);
  // and the reference's FP8 checkpoint holds exactly these names and shapes
  const auto file = dsv32::SafetensorsFile::open(kGoldenDir + "tiny_fp8_plain_scale/model0-mp1.safetensors");
  CHECK(file->tensors().size() == list.size());
  for (const auto& e : list) {
    CAPTURE(e.name);
    const auto* t = file->find(e.name);
    REQUIRE(t != nullptr);
    CHECK(t->shape == e.shape.dims());
  }
}

TEST_CASE("Transformer<Config671B>: the memory plan of the released model, nothing allocated") {
  const std::size_t rss_before = resident_bytes();
  dsv32::RuntimeOptions o;
  o.max_batch_size = 1;
  o.max_seq_len = 16;
  dsv32::Transformer<Config671B, Cpu> model(o);
  const dsv32::MemoryPlan plan = model.memory_plan();
  CHECK(plan.parameters == 671'877'944'064);

  // an independent count by dtype, from the architecture (61 layers, 3 dense, 58 MoE with 256 routed
  // experts and 1 shared, each 3 x 7168 x 2048)
  using I = std::int64_t;
  auto blocks = [](I out, I in) { return ((out + 127) / 128) * ((in + 127) / 128); };
  struct Lin {
    I out, in;
  };
  const Lin attn_fp8[] = {{1536, 7168},       {128 * 192, 1536}, {512 + 64, 7168}, {128 * 256, 512},
                          {7168, 128 * 128},  {64 * 128, 1536},  {128, 7168}};
  const Lin dense[] = {{18432, 7168}, {7168, 18432}, {18432, 7168}};
  const Lin expert[] = {{2048, 7168}, {7168, 2048}, {2048, 7168}};
  I fp8 = 0, scales = 0;
  for (const Lin& l : attn_fp8) fp8 += 61 * l.out * l.in, scales += 61 * blocks(l.out, l.in);
  for (const Lin& l : dense) fp8 += 3 * l.out * l.in, scales += 3 * blocks(l.out, l.in);
  for (const Lin& l : expert) fp8 += 58 * 257 * l.out * l.in, scales += 58 * 257 * blocks(l.out, l.in);
  // embed, head (kept in its stored bf16, widened to f32 as it is read), weights_proj, gate
  const I bf16 = 2 * 129280LL * 7168 + 61 * 64LL * 7168 + 58 * 256LL * 7168;
  const I f32 = 61 * (2 * 7168 + 1536 + 512 + 2 * 128) + 7168  // norms, k_norm, final norm
                + 58 * 256;                                     // gate bias
  CHECK(fp8 + bf16 + f32 == 671'877'944'064);
  CHECK(plan.weight_bytes.at(DType::F8_E4M3) == static_cast<std::size_t>(fp8));
  CHECK(plan.weight_bytes.at(DType::BF16) == static_cast<std::size_t>(2 * bf16));
  CHECK(plan.weight_bytes.at(DType::F32) == static_cast<std::size_t>(4 * (f32 + scales)));
  CHECK(plan.weight_bytes.size() == 3);
  CHECK(plan.weights == static_cast<std::size_t>(fp8 + 2 * bf16 + 4 * (f32 + scales)));
  // caches per position: bf16 latent (512) and rope key (64), FP8 indexer key (128) and its f32 scale
  CHECK(plan.cache_bytes_per_token == 61u * ((512 + 64) * 2 + 128 + 4));
  CHECK(plan.caches == plan.cache_bytes_per_token * 16);
  CHECK(plan.rope_tables == 2u * 16 * 32 * sizeof(float));
  CHECK(plan.scratch > 0);  // the forward temporaries for 1 x 16 tokens (checked against real allocations elsewhere)
  CHECK(plan.total() == plan.weights + plan.caches + plan.rope_tables + plan.scratch);
  CHECK(dsv32::Transformer<Config671B, Cpu>::memory_plan(o).parameters == plan.parameters);

  // nothing was loaded or allocated
  int loaded = 0, listed = 0;
  model.visit([&](const std::string&, Param& p) {
    ++listed;
    loaded += p.loaded();
  });
  CHECK(loaded == 0);
  CHECK(listed > 61 * 256 * 3);
  CHECK_FALSE(model.ready());
  const std::size_t rss = resident_bytes();
  MESSAGE("resident memory with the 671B model constructed: " << rss / (1 << 20) << " MiB (before: "
                                                              << rss_before / (1 << 20) << " MiB)");
  CHECK(rss < (std::size_t{2} << 30));
  CHECK(rss - std::min(rss, rss_before) < (std::size_t{512} << 20));
  CHECK(dsv32::format_bytes(static_cast<double>(plan.weights)).ends_with(" GiB"));
}

TEST_CASE("Transformer::forward validates every argument before touching the caches") {
  const auto opts = tiny_options();
  {
    dsv32::Transformer<TinyBf16> unloaded(opts);
    const auto tokens = random_tokens(4, 1);
    CHECK(contains(error_of([&] { unloaded.forward(tokens, 1, 0); }, ErrorKind::state), "weights are not loaded"));
  }
  dsv32::Transformer<TinyBf16> model(opts);
  model.init_random(5);
  REQUIRE(model.ready());
  const std::vector<std::int32_t> prompt = random_tokens(2 * 4, 2);  // 2 sequences x 4 tokens
  model.forward(prompt, 2, 0);

  const std::vector<std::int32_t> two = {1, 2};
  struct Case {
    const char* what;
    std::function<void()> call;
    const char* message;
  };
  std::vector<std::int32_t> bad_token = random_tokens(6, 3);
  bad_token[5] = 300;  // sequence 1, its third token
  std::vector<std::int32_t> negative = random_tokens(2, 4);
  negative[0] = -1;
  const std::vector<std::int32_t> none;
  const std::vector<std::int32_t> five = random_tokens(5, 5);
  const std::vector<std::int32_t> long_seq = random_tokens(2 * 21, 6);
  const std::vector<Case> cases = {
      {"batch 0", [&] { model.forward(two, 0, 4); }, "forward: batch size 0 outside [1, max_batch_size = 2]"},
      {"batch 3", [&] { model.forward(random_tokens(3, 7), 3, 4); }, "forward: batch size 3 outside [1, max_batch_size = 2]"},
      {"no tokens", [&] { model.forward(none, 1, 4); }, "forward: no tokens"},
      {"uneven", [&] { model.forward(five, 2, 4); }, "forward: 5 tokens do not split into 2 sequences of equal length"},
      {"too long", [&] { model.forward(long_seq, 2, 4); }, "forward: positions [4, 25) exceed max_seq_len = 24"},
      {"negative start", [&] { model.forward(two, 2, -1); }, "forward: start_pos must be >= 0, got -1"},
      {"token 300", [&] { model.forward(bad_token, 2, 2); },
       "forward: token id 300 (sequence 1, position 4) outside the vocabulary [0, 300)"},
      {"token -1", [&] { model.forward(negative, 1, 0); },
       "forward: token id -1 (sequence 0, position 0) outside the vocabulary [0, 300)"},
      {"gap", [&] { model.forward(two, 2, 5); }, "forward: sequence 0 starts at position 5 but only positions [0, 4) are cached"},
      {"ragged", [&] { model.forward(std::vector<std::vector<std::int32_t>>{{1, 2, 3}, {4, 5}}, 4); },
       "forward: sequence 1 has 2 tokens, sequence 0 has 3 (a call's sequences share one length)"},
      {"no sequences", [&] { model.forward(std::vector<std::vector<std::int32_t>>{}, 4); }, "forward: no sequences"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    CHECK(contains(error_of(c.call, ErrorKind::invalid_argument), c.message));
  }
  // a sequence slot that was never filled cannot continue at position 4
  dsv32::Transformer<TinyBf16> one_seq(opts);
  one_seq.init_random(5);
  one_seq.forward(random_tokens(4, 8), 1, 0);
  CHECK(contains(error_of([&] { one_seq.forward(two, 2, 4); }, ErrorKind::invalid_argument),
                 "sequence 1 starts at position 4 but only positions [0, 0) are cached"));

  // the failed calls changed nothing: the next decode step equals a fresh model's
  const std::vector<std::int32_t> step = {17, 230};
  const dsv32::Logits after = model.forward(step, 2, 4);
  dsv32::Transformer<TinyBf16> fresh(opts);
  fresh.init_random(5);
  fresh.forward(prompt, 2, 0);
  const dsv32::Logits want = fresh.forward(step, 2, 4);
  CHECK(after.batch == 2);
  CHECK(after.positions == 1);
  CHECK(after.vocab == 300);
  CHECK(after.values == want.values);
  // the vector-of-vectors form is the same call
  fresh.reset();
  model.reset();
  const auto flat = model.forward(prompt, 2, 0);
  const auto nested = fresh.forward(std::vector<std::vector<std::int32_t>>{{prompt.begin(), prompt.begin() + 4},
                                                                           {prompt.begin() + 4, prompt.end()}},
                                    0);
  CHECK(flat.values == nested.values);
}

TEST_CASE("Transformer::forward: all_positions returns every position; the last equals the default call") {
  dsv32::Transformer<TinyBf16> model(tiny_options());
  model.init_random(11);
  const std::int64_t batch = 2, seq = 9;
  const auto tokens = random_tokens(batch * seq, 12);
  const dsv32::Logits all = model.forward(tokens, batch, 0, {.all_positions = true});
  CHECK(all.batch == batch);
  CHECK(all.positions == seq);
  CHECK(all.values.size() == static_cast<std::size_t>(batch * seq * 300));
  model.reset();
  const dsv32::Logits last = model.forward(tokens, batch, 0);
  CHECK(last.positions == 1);
  for (std::int64_t b = 0; b < batch; ++b) {
    // the same hidden state through the f32 head; the head's GEMM runs on 18 rows instead of 2, and
    // Eigen's kernels for different row blockings may round an f32 sum differently (~1 ulp)
    const auto a = all.row(b, seq - 1), l = last.row(b);
    double err = 0.0, mag = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      err = std::max(err, std::fabs(static_cast<double>(a[i]) - l[i]));
      mag = std::max(mag, std::fabs(static_cast<double>(l[i])));
    }
    CHECK(err <= 1e-6 * mag);
    CHECK(all.argmax(b) == last.argmax(b));
    const auto first = all.row(b, 0);
    CHECK(std::vector<float>(first.begin(), first.end()) != std::vector<float>(l.begin(), l.end()));
  }
  // position p of the call is the last position of a prefill of p + 1 tokens (causality)
  model.reset();
  const dsv32::Logits prefix = model.forward(columns(tokens, batch, 0, 3), batch, 0);
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto a = all.row(b, 2), p = prefix.row(b);
    double err = 0.0, mag = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      err = std::max(err, std::fabs(static_cast<double>(a[i]) - p[i]));
      mag = std::max(mag, std::fabs(static_cast<double>(p[i])));
    }
    CHECK(err <= 1e-6 * mag);
  }
}

TEST_CASE("Transformer::forward: a prefill in two chunks gives the one-shot prefill's logits") {
  dsv32::Transformer<TinyBf16> model(tiny_options());
  model.init_random(21);
  const std::int64_t batch = 2, seq = 11, k = 4;
  const auto tokens = random_tokens(batch * seq, 22);
  const dsv32::Logits once = model.forward(tokens, batch, 0);
  model.reset();
  model.forward(columns(tokens, batch, 0, k), batch, 0);                           // positions [0, 4)
  const dsv32::Logits chunked = model.forward(columns(tokens, batch, k, seq - k), batch, k);  // [4, 11)
  double err = 0.0;
  for (std::size_t i = 0; i < once.values.size(); ++i)
    err = std::max(err, std::fabs(static_cast<double>(once.values[i]) - chunked.values[i]));
  MESSAGE("chunked vs one-shot prefill: max |logit difference| = " << err << " (max |logit| " << max_abs(once.values) << ")");
  CHECK(err <= 1e-6 * max_abs(once.values));
  // and a decode step after either continues identically
  const std::vector<std::int32_t> step = {5, 6};
  const dsv32::Logits after_chunked = model.forward(step, batch, seq);
  model.reset();
  model.forward(tokens, batch, 0);
  const dsv32::Logits after_once = model.forward(step, batch, seq);
  double derr = 0.0;
  for (std::size_t i = 0; i < after_once.values.size(); ++i)
    derr = std::max(derr, std::fabs(static_cast<double>(after_once.values[i]) - after_chunked.values[i]));
  CHECK(derr <= 1e-6 * max_abs(after_once.values));
}

TEST_CASE_TEMPLATE("Transformer::forward: the last block's FFN on the last rows only gives the full pass's logits bit for bit",
                   Config, dsv32::TinyBf16, dsv32::TinyFp8Ue8m0Yarn, dsv32::TinyFp8PlainScale) {
  static_assert(Config::n_layers > Config::n_dense_layers, "the last block should be an MoE");
  dsv32::Transformer<Config> model(tiny_options());
  model.init_random(31);
  const std::int64_t batch = 2, seq = 13;
  const auto tokens = random_tokens(batch * seq, 32, Config::vocab_size);
  const std::vector<std::int32_t> step = {7, 8};
  const dsv32::Logits full = model.forward(tokens, batch, 0, {.full_last_block = true});
  const dsv32::Logits full_next = model.forward(step, batch, seq, {.full_last_block = true});
  model.reset();
  const dsv32::Logits skipped = model.forward(tokens, batch, 0);  // the default: last rows only
  const dsv32::Logits skipped_next = model.forward(step, batch, seq);
  REQUIRE(full.values.size() == static_cast<std::size_t>(batch * Config::vocab_size));
  CHECK(max_abs(full.values) > 0.0);
  CHECK(skipped.values == full.values);
  CHECK(skipped_next.values == full_next.values);  // the caches the skipped rows filled are the same
  // and a batch of one sequence of one token (seq == 1: nothing to skip) is unaffected
  model.reset();
  const dsv32::Logits one = model.forward(std::vector<std::int32_t>{3, 4}, batch, 0);
  model.reset();
  const dsv32::Logits one_full = model.forward(std::vector<std::int32_t>{3, 4}, batch, 0, {.full_last_block = true});
  CHECK(one.values == one_full.values);
}

TEST_CASE_TEMPLATE("Transformer::forward: the absorbed prefill equals feeding the prompt token by token through decode",
                   Config, dsv32::TinyBf16, dsv32::TinyFp8Ue8m0Yarn) {
  dsv32::RuntimeOptions o = tiny_options();
  o.absorbed_prefill_from = 0;  // every prefill pass absorbed
  dsv32::Transformer<Config> model(o);
  model.init_random(41);
  const std::int64_t batch = 2, seq = 13;
  const auto tokens = random_tokens(batch * seq, 42, Config::vocab_size);
  const dsv32::Logits prefill = model.forward(tokens, batch, 0, {.all_positions = true});
  const std::vector<std::int32_t> step = {9, 10};
  const dsv32::Logits prefill_next = model.forward(step, batch, seq);
  model.reset();
  double worst = 0.0;
  for (std::int64_t p = 0; p < seq; ++p) {  // position p of the prefill = the decode step at p
    const dsv32::Logits d = model.forward(columns(tokens, batch, p, 1), batch, p);
    for (std::int64_t b = 0; b < batch; ++b) {
      const auto a = prefill.row(b, p), e = d.row(b);
      double err = 0.0, mag = 0.0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        err = std::max(err, std::fabs(static_cast<double>(a[i]) - e[i]));
        mag = std::max(mag, std::fabs(static_cast<double>(e[i])));
      }
      CHECK(mag > 0.0);
      worst = std::max(worst, err / mag);
    }
  }
  const dsv32::Logits decode_next = model.forward(step, batch, seq);
  MESSAGE("absorbed prefill vs token-by-token decode: worst |logit difference| / max |logit| = " << worst);
  CHECK(worst <= 1e-6);
  CHECK(std::fabs(max_abs(prefill_next.values) - max_abs(decode_next.values)) <= 1e-6 * max_abs(decode_next.values));
  double next_err = 0.0;
  for (std::size_t i = 0; i < decode_next.values.size(); ++i)
    next_err = std::max(next_err, std::fabs(static_cast<double>(prefill_next.values[i]) - decode_next.values[i]));
  CHECK(next_err <= 1e-6 * max_abs(decode_next.values));  // the caches the two wrote agree
}

TEST_CASE("Transformer::forward: an absorbed prefill longer than one block of queries equals token-by-token decode") {
  dsv32::RuntimeOptions o;
  o.max_batch_size = 1;
  o.max_seq_len = 640;
  o.absorbed_prefill_from = 0;
  const std::int64_t seq = 2 * dsv32::kLatentRows + 37;  // three blocks of queries
  dsv32::Transformer<TinyBf16> model(o);
  model.init_random(51);
  const auto tokens = random_tokens(static_cast<std::size_t>(seq), 52);
  const dsv32::Logits prefill = model.forward(tokens, 1, 0);
  model.reset();
  dsv32::Logits last;
  for (std::int64_t p = 0; p < seq; ++p) last = model.forward(columns(tokens, 1, p, 1), 1, p);
  CHECK(max_abs(last.values) > 0.0);
  CHECK(prefill.values == last.values);
}

TEST_CASE("Transformer: the memory plan counts the absorbed prefill's scratch instead of the expanded keys") {
  dsv32::RuntimeOptions o;
  o.max_batch_size = 1;
  o.max_seq_len = 160 * 1024;
  o.max_tokens_per_call = 2048;
  o.absorbed_prefill_from = o.max_seq_len;  // never absorbed: keys for every position
  const auto expanded = dsv32::Transformer<Config671B>::memory_plan(o);
  o.absorbed_prefill_from = 8192;
  const auto absorbed = dsv32::Transformer<Config671B>::memory_plan(o);
  // per expanded position: its keys (128 heads x (128 + 128) bf16 = 64 KiB), its latent and rotated key
  // gathered from the pages (512 + 64 bf16) and its cache row's index in the pass's metadata (an int32);
  // the latent path's q_lat and o_lat (256 tokens at a time) are reserved either way
  const std::size_t per_position = 128 * 256 * 2 + (512 + 64) * 2 + 4;
  CHECK(expanded.scratch - absorbed.scratch == per_position * (160 * 1024 - 8192));
  MESSAGE("671B, 160K positions, 2048-token passes: forward scratch " << expanded.scratch / 1e9 << " GB expanded, "
                                                                      << absorbed.scratch / 1e9 << " GB with absorbed prefill from 8192");
  o.absorbed_prefill_from = -1;
  CHECK(contains(error_of([&] { o.validate(); }, ErrorKind::invalid_config), "absorbed_prefill_from must be >= 0"));
}

TEST_CASE("Transformer::init_random is deterministic in its seed") {
  const auto opts = tiny_options();
  dsv32::Transformer<TinyBf16> a(opts), b(opts), c(opts);
  a.init_random(42);
  b.init_random(42);
  c.init_random(43);
  std::vector<const Param*> pa, pb, pc;
  a.visit([&](const std::string&, Param& p) { pa.push_back(&p); });
  b.visit([&](const std::string&, Param& p) { pb.push_back(&p); });
  c.visit([&](const std::string&, Param& p) { pc.push_back(&p); });
  REQUIRE(pa.size() == pb.size());
  int same_ab = 0, same_ac = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    REQUIRE(pa[i]->loaded());
    CHECK_FALSE(pa[i]->borrowed());
    same_ab += std::memcmp(pa[i]->data(), pb[i]->data(), pa[i]->bytes()) == 0;
    same_ac += std::memcmp(pa[i]->data(), pc[i]->data(), pa[i]->bytes()) == 0;
  }
  CHECK(same_ab == static_cast<int>(pa.size()));
  CHECK(same_ac == 0);
  const auto tokens = random_tokens(6, 9);
  const auto la = a.forward(tokens, 1, 0), lb = b.forward(tokens, 1, 0), lc = c.forward(tokens, 1, 0);
  CHECK(la.values == lb.values);
  CHECK(la.values != lc.values);
  // the documented ranges: norms near 1, linears ~ N(0, 1/in)
  const float* norm = nullptr;
  a.visit([&](const std::string& name, Param& p) {
    if (name == "layers.0.attn_norm.weight") norm = p.as<float>();
  });
  REQUIRE(norm != nullptr);
  double mean = 0.0;
  for (int i = 0; i < 96; ++i) mean += norm[i] / 96.0;
  CHECK(std::fabs(mean - 1.0) < 0.1);
}

TEST_CASE("Transformer: a memory plan the machine cannot hold is refused before anything is allocated") {
  // caches for 2^16 sequences of 2^16 positions (terabytes; each option within its bounds) at load:
  // refused with both figures, nothing left loaded
  dsv32::RuntimeOptions wide = tiny_options();
  wide.max_batch_size = std::int64_t{1} << 16;
  wide.max_seq_len = std::int64_t{1} << 16;
  dsv32::Transformer<TinyBf16> m(wide);
  const std::string load = error_of([&] { m.init_random(1); }, ErrorKind::out_of_memory);
  CHECK(contains(load, "the model needs "));
  CHECK(contains(load, "of cpu memory for its weights ("));
  CHECK(contains(load, "caches ("));
  CHECK(contains(load, "are available; lower max_batch_size, max_seq_len or max_tokens_per_call"));
  CHECK(contains(load, "forward scratch ("));
  CHECK_FALSE(m.ready());
  int loaded = 0;
  m.visit([&](const std::string&, Param& p) { loaded += p.loaded(); });
  CHECK(loaded == 0);
  const std::string call = error_of([&] { m.forward(random_tokens(3, 1), 1, 0); }, ErrorKind::state);
  CHECK(contains(call, "not loaded"));
}
