// Tests of dsv32/config: parameter counts (the released model's published totals, a tiny preset
// counted by hand and from its checkpoint), config.json parsing (defaults, unknown keys, wrong
// types, the gate_bias rule), check_matches, and the runtime validation of configs and options.
#include "dsv32/config/model_args.hpp"
#include "dsv32/config/tensor_table.hpp"
#include "dsv32/config/presets.hpp"
#include "dsv32/io/safetensors.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include "support/test_support.hpp"

using dsv32::test::error_of;
using dsv32::test::contains;

namespace {

using dsv32::ErrorKind;
using dsv32::ModelArgs;
using nlohmann::json;

const std::string kData = DSV32_TEST_DATA;



json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);
}

}  // namespace

TEST_CASE("param_counts: the released 671B model's published totals") {
  static_assert(dsv32::param_counts<dsv32::Config671B>.total == 671'877'944'064);
  static_assert(dsv32::param_counts<dsv32::Config671B>.activated == 38'403'822'336);
  constexpr auto p = dsv32::param_counts<dsv32::Config671B>;
  CHECK(p.total == 671'877'944'064);
  CHECK(p.activated == 38'403'822'336);
  CHECK(p.embedding == 129280LL * 7168);
  CHECK(p.head == 129280LL * 7168);
  CHECK(p.expert == 3LL * 7168 * 2048);
  CHECK(p.dense_mlp == 3LL * 7168 * 18432);
  CHECK(p.gate == 256LL * 7168 + 256);  // gate bias because dim == 7168
  // indexer: wq_b, wk, k_norm (weight, bias), weights_proj
  CHECK(p.indexer == 1536LL * 64 * 128 + 7168LL * 128 + 2 * 128 + 7168LL * 64);
}

TEST_CASE("param_counts: TinyBf16 against a hand count and against its golden checkpoint") {
  // vocab 300, dim 96, inter 160, moe_inter 48, 3 layers (1 dense), 3 heads, 8 routed + 2 shared
  // experts (3 active), q_lora 64, kv_lora 32, nope 16, rope 8, v 24, indexer 8 heads x 128.
  const std::int64_t attention = 96 * 64 + 64                 // wq_a, q_norm
                                 + 64 * 3 * (16 + 8)          // wq_b
                                 + 96 * (32 + 8) + 32         // wkv_a, kv_norm
                                 + 32 * 3 * (16 + 24)         // wkv_b
                                 + 3 * 24 * 96                // wo
                                 + 64 * 8 * 128 + 96 * 128    // indexer wq_b, wk
                                 + 2 * 128 + 96 * 8           // k_norm, weights_proj
                                 + 2 * 96;                    // attn_norm, ffn_norm
  CHECK(attention == 104480);
  const std::int64_t expert = 3 * 96 * 48, gate = 8 * 96 + 8;
  const std::int64_t total = 2 * 300 * 96 + 96 + 3 * attention + 3 * 96 * 160 + 2 * (gate + 10 * expert);
  const std::int64_t activated = 2 * 300 * 96 + 96 + 3 * attention + 3 * 96 * 160 + 2 * (gate + 5 * expert);
  CHECK(total == 695248);
  CHECK(activated == 557008);
  constexpr auto p = dsv32::param_counts<dsv32::TinyBf16>;
  CHECK(p.attention == attention);
  CHECK(p.expert == expert);
  CHECK(p.gate == gate);
  CHECK(p.total == total);
  CHECK(p.activated == activated);

  // the reference's own checkpoint of this shape holds exactly that many elements
  const auto file = dsv32::SafetensorsFile::open(kData + "/golden/tiny_bf16/model0-mp1.safetensors");
  std::int64_t in_file = 0;
  for (const auto& t : file->tensors()) in_file += t.numel();
  CHECK(in_file == total);

  // an FP8 preset: scales are not parameters, so its checkpoint holds more elements than the count
  const auto fp8 = dsv32::SafetensorsFile::open(kData + "/golden/tiny_fp8_plain_scale/model0-mp1.safetensors");
  std::int64_t weights = 0;
  for (const auto& t : fp8->tensors())
    if (!t.name.ends_with(".scale")) weights += t.numel();
  CHECK(weights == dsv32::param_counts<dsv32::TinyFp8PlainScale>.total);
  CHECK(dsv32::param_counts<dsv32::TinyFp8PlainScale>.gate == 16 * 256);        // no gate bias
  CHECK(dsv32::param_counts<dsv32::TinyFp8Ue8m0Yarn>.gate == 16 * 256 + 16);    // gate bias
}

TEST_CASE("ModelArgs::from_json: absent fields keep the reference's defaults") {
  const ModelArgs a = ModelArgs::from_json(json::object());
  CHECK(a.vocab_size == 102400);
  CHECK(a.dim == 2048);
  CHECK(a.inter_dim == 10944);
  CHECK(a.moe_inter_dim == 1408);
  CHECK(a.n_layers == 27);
  CHECK(a.n_dense_layers == 1);
  CHECK(a.n_heads == 16);
  CHECK(a.n_routed_experts == 64);
  CHECK(a.n_shared_experts == 2);
  CHECK(a.n_activated_experts == 6);
  CHECK(a.n_expert_groups == 1);
  CHECK(a.n_limited_groups == 1);
  CHECK(a.score_func == dsv32::ScoreFunc::softmax);
  CHECK(a.route_scale == 1.0);
  CHECK(a.q_lora_rank == 0);
  CHECK(a.kv_lora_rank == 512);
  CHECK(a.qk_nope_head_dim == 128);
  CHECK(a.qk_rope_head_dim == 64);
  CHECK(a.v_head_dim == 128);
  CHECK(a.index_n_heads == 64);
  CHECK(a.index_head_dim == 128);
  CHECK(a.index_topk == 2048);
  CHECK(a.dtype == dsv32::WeightDType::bf16);
  CHECK(a.scale_fmt == dsv32::ScaleFmt::none);
  CHECK_FALSE(a.gate_bias.has_value());
  CHECK_FALSE(a.indexer_rope_interleaved);
  CHECK(a.runtime.max_batch_size == 8);
  CHECK(a.runtime.max_seq_len == 16384);
  CHECK(a.runtime.original_seq_len == 4096);
  CHECK(a.runtime.rope_theta == 10000.0);
  CHECK(a.runtime.rope_factor == 40.0);
  CHECK(a.runtime.beta_fast == 32);
  CHECK(a.runtime.beta_slow == 1);
  CHECK(a.runtime.mscale == 1.0);
}

TEST_CASE("ModelArgs::from_json: values of every kind are read") {
  const ModelArgs a = ModelArgs::from_json(json{{"dim", 7168},
                                                {"route_scale", 2},  // an integer is a number
                                                {"rope_factor", 4.5},
                                                {"score_func", "sigmoid"},
                                                {"dtype", "fp8"},
                                                {"scale_fmt", "ue8m0"},
                                                {"indexer_rope_interleaved", true},
                                                {"max_seq_len", 64}});
  CHECK(a.dim == 7168);
  CHECK(a.route_scale == 2.0);
  CHECK(a.runtime.rope_factor == 4.5);
  CHECK(a.runtime.max_seq_len == 64);
  CHECK(a.score_func == dsv32::ScoreFunc::sigmoid);
  CHECK(a.dtype == dsv32::WeightDType::fp8);
  CHECK(a.scale_fmt == dsv32::ScaleFmt::ue8m0);
  CHECK(a.indexer_rope_interleaved);
  CHECK(ModelArgs::from_json(json{{"scale_fmt", nullptr}}).scale_fmt == dsv32::ScaleFmt::none);
  CHECK(ModelArgs::from_json(json{{"score_func", "softmax"}}).score_func == dsv32::ScoreFunc::softmax);
}

TEST_CASE("ModelArgs: gate_bias absent follows the reference's dim == 7168 rule") {
  CHECK_FALSE(ModelArgs::from_json(json::object()).resolved_gate_bias());
  CHECK(ModelArgs::from_json(json{{"dim", 7168}}).resolved_gate_bias());
  CHECK_FALSE(ModelArgs::from_json(json{{"dim", 7168}, {"gate_bias", false}}).resolved_gate_bias());
  CHECK(ModelArgs::from_json(json{{"dim", 96}, {"gate_bias", true}}).resolved_gate_bias());
  const ModelArgs null_bias = ModelArgs::from_json(json{{"dim", 7168}, {"gate_bias", nullptr}});
  CHECK_FALSE(null_bias.gate_bias.has_value());
  CHECK(null_bias.resolved_gate_bias());
  // to_json leaves an unset gate_bias out, so the rule applies again when read back
  CHECK_FALSE(null_bias.to_json().contains("gate_bias"));
  CHECK(ModelArgs::from_json(json{{"gate_bias", false}}).to_json().at("gate_bias") == false);
}

TEST_CASE("ModelArgs::from_json: unknown keys and wrong types are errors naming the field and the source") {
  auto parse = [](const json& j) { return [j] { ModelArgs::from_json(j, "my/config.json"); }; };
  std::string w = error_of(parse(json{{"dim", 64}, {"n_layer", 3}}), ErrorKind::invalid_config);
  CHECK(contains(w, "my/config.json"));
  CHECK(contains(w, "unknown key \"n_layer\""));

  w = error_of(parse(json{{"dim", "7168"}}), ErrorKind::invalid_config);
  CHECK(contains(w, "my/config.json: field \"dim\" must be an integer, found string \"7168\""));
  w = error_of(parse(json{{"n_heads", 1.5}}), ErrorKind::invalid_config);
  CHECK(contains(w, "field \"n_heads\" must be an integer, found number 1.5"));
  w = error_of(parse(json{{"route_scale", "2.5"}}), ErrorKind::invalid_config);
  CHECK(contains(w, "field \"route_scale\" must be a number"));
  w = error_of(parse(json{{"indexer_rope_interleaved", 1}}), ErrorKind::invalid_config);
  CHECK(contains(w, "field \"indexer_rope_interleaved\" must be true or false"));
  w = error_of(parse(json{{"gate_bias", "yes"}}), ErrorKind::invalid_config);
  CHECK(contains(w, "field \"gate_bias\" must be true, false or null"));
  w = error_of(parse(json{{"score_func", "relu"}}), ErrorKind::invalid_config);
  CHECK(contains(w, "field \"score_func\" must be \"softmax\" or \"sigmoid\", found string \"relu\""));
  w = error_of(parse(json{{"dtype", "fp16"}}), ErrorKind::invalid_config);
  CHECK(contains(w, "field \"dtype\" must be \"bf16\" or \"fp8\""));
  w = error_of(parse(json{{"scale_fmt", "e8m0"}}), ErrorKind::invalid_config);
  CHECK(contains(w, "field \"scale_fmt\" must be null or \"ue8m0\""));
  w = error_of(parse(json{{"max_seq_len", nullptr}}), ErrorKind::invalid_config);
  CHECK(contains(w, "field \"max_seq_len\" must be an integer, found null"));
  w = error_of(parse(json::array({1, 2})), ErrorKind::invalid_config);
  CHECK(contains(w, "my/config.json: expected a JSON object, found array"));
  // runtime options are validated while parsing
  w = error_of(parse(json{{"max_batch_size", 0}}), ErrorKind::invalid_config);
  CHECK(contains(w, "max_batch_size must be in [1, 65536], got 0"));
}

TEST_CASE("ModelArgs::from_file: the released 671B config matches Config671B; bad files are named") {
  const std::string path = kData + "/configs/config_671B_v3.2.json";
  const ModelArgs a = ModelArgs::from_file(path);
  CHECK(a.mismatches<dsv32::Config671B>().empty());
  CHECK_NOTHROW(a.check_matches<dsv32::Config671B>(path));
  CHECK(a.resolved_gate_bias());  // absent in the file: dim == 7168
  CHECK_NOTHROW(a.validate(path));
  // the file's own fields, read back
  const json j = read_json(path);
  CHECK(a.to_json().at("index_topk") == j.at("index_topk"));
  CHECK(a.to_json().at("scale_fmt") == "ue8m0");

  CHECK(contains(error_of([] { ModelArgs::from_file("/nonexistent/dir/config.json"); }, ErrorKind::io),
                 "/nonexistent/dir/config.json"));
  // every golden scenario's config.json matches its preset
  CHECK(ModelArgs::from_file(kData + "/golden/tiny_bf16/config.json").mismatches<dsv32::TinyBf16>().empty());
  CHECK(ModelArgs::from_file(kData + "/golden/tiny_bf16_rope_interleaved/config.json")
            .mismatches<dsv32::TinyBf16RopeInterleaved>()
            .empty());
  CHECK(ModelArgs::from_file(kData + "/golden/tiny_fp8_ue8m0_yarn/config.json").mismatches<dsv32::TinyFp8Ue8m0Yarn>().empty());
  CHECK(ModelArgs::from_file(kData + "/golden/tiny_fp8_plain_scale/config.json").mismatches<dsv32::TinyFp8PlainScale>().empty());
}

TEST_CASE("ModelArgs::from_file: invalid JSON is an invalid_config error naming the file") {
  const std::string path = dsv32::test::kGoldenDir + "tiny_bf16/manifest.json";  // valid JSON, wrong keys
  CHECK(contains(error_of([&] { ModelArgs::from_file(path); }, ErrorKind::invalid_config), "unknown key"));
  // a file that is not JSON at all: the safetensors checkpoint
  const std::string bin = dsv32::test::kGoldenDir + "tiny_bf16/model0-mp1.safetensors";
  const std::string w = error_of([&] { ModelArgs::from_file(bin); }, ErrorKind::invalid_config);
  CHECK(contains(w, "model0-mp1.safetensors: not valid JSON"));
}

TEST_CASE("ModelArgs::check_matches lists every mismatching shape field, not runtime options") {
  json j = read_json(kData + "/configs/config_671B_v3.2.json");
  j["dim"] = 1024;          // also flips the gate_bias rule (absent, dim != 7168)
  j["n_heads"] = 64;
  j["dtype"] = "bf16";
  j["max_seq_len"] = 128;   // runtime option: not a mismatch
  j["rope_factor"] = 8.0;
  const ModelArgs a = ModelArgs::from_json(j);
  const auto diffs = a.mismatches<dsv32::Config671B>();
  REQUIRE(diffs.size() == 4);
  const std::string w = error_of([&] { a.check_matches<dsv32::Config671B>("dir/config.json"); }, ErrorKind::invalid_config);
  CHECK(contains(w, "dir/config.json disagrees with the compiled config deepseek-v3.2-exp-671b in 4 field(s):"));
  CHECK(contains(w, "\n  dim: config.json has 1024, the compiled config (deepseek-v3.2-exp-671b) has 7168"));
  CHECK(contains(w, "\n  n_heads: config.json has 64, the compiled config (deepseek-v3.2-exp-671b) has 128"));
  CHECK(contains(w, "\n  dtype: config.json has \"bf16\", the compiled config (deepseek-v3.2-exp-671b) has \"fp8\""));
  CHECK(contains(w, "\n  gate_bias: config.json has false, the compiled config (deepseek-v3.2-exp-671b) has true"));
  CHECK_FALSE(contains(w, "max_seq_len"));
  CHECK_FALSE(contains(w, "rope_factor"));

  // an explicit gate_bias equal to the rule's result is no mismatch
  json k = read_json(kData + "/configs/config_671B_v3.2.json");
  k["gate_bias"] = true;
  CHECK(ModelArgs::from_json(k).mismatches<dsv32::Config671B>().empty());
  k["gate_bias"] = false;
  CHECK(ModelArgs::from_json(k).mismatches<dsv32::Config671B>().size() == 1);

  // round trip: a preset's fields as JSON read back equal the preset
  CHECK(ModelArgs::from_json(ModelArgs::of<dsv32::TinyFp8Ue8m0Yarn>().to_json()).mismatches<dsv32::TinyFp8Ue8m0Yarn>().empty());
  CHECK(ModelArgs::from_json(ModelArgs::of<dsv32::TinyBf16>().to_json()).mismatches<dsv32::TinyFp8Ue8m0Yarn>().size() > 5);
}

TEST_CASE("ModelArgs::validate names the broken invariant") {
  struct Case {
    const char* what;
    std::function<void(ModelArgs&)> breakit;
    const char* message;
  };
  const Case cases[] = {
      {"dim", [](ModelArgs& a) { a.dim = 0; }, "vocab_size, dim, inter_dim, moe_inter_dim, n_layers and n_heads must be > 0"},
      {"n_dense_layers", [](ModelArgs& a) { a.n_dense_layers = 4; }, "n_dense_layers must be in [0, n_layers]"},
      {"n_shared_experts", [](ModelArgs& a) { a.n_shared_experts = -1; }, "n_routed_experts must be > 0, n_shared_experts >= 0"},
      {"n_activated_experts", [](ModelArgs& a) { a.n_activated_experts = 9; }, "n_activated_experts must be in [1, n_routed_experts]"},
      {"n_expert_groups", [](ModelArgs& a) { a.n_expert_groups = 3; }, "n_routed_experts must be divisible by n_expert_groups"},
      {"n_limited_groups", [](ModelArgs& a) { a.n_limited_groups = 3; }, "n_limited_groups must be in [1, n_expert_groups]"},
      {"activated vs groups", [](ModelArgs& a) { a.n_activated_experts = 5; },
       "n_activated_experts must not exceed the experts in the n_limited_groups chosen groups"},
      {"gate_bias groups", [](ModelArgs& a) { a.n_expert_groups = 8; a.n_limited_groups = 3; },
       "with gate_bias and n_expert_groups > 1 each group needs >= 2 experts"},
      {"route_scale", [](ModelArgs& a) { a.route_scale = 0.0; }, "route_scale must be > 0"},
      {"q_lora_rank", [](ModelArgs& a) { a.q_lora_rank = 0; }, "q_lora_rank and kv_lora_rank must be > 0"},
      {"v_head_dim", [](ModelArgs& a) { a.v_head_dim = 0; }, "qk_nope_head_dim and v_head_dim must be > 0"},
      {"qk_rope_head_dim", [](ModelArgs& a) { a.qk_rope_head_dim = 7; }, "qk_rope_head_dim must be even and > 0"},
      {"index_topk", [](ModelArgs& a) { a.index_topk = 0; }, "index_n_heads and index_topk must be > 0"},
      {"index_head_dim", [](ModelArgs& a) { a.index_head_dim = 192; },
       "index_head_dim must be a power of two and a multiple of 128"},
      {"index_head_dim 64", [](ModelArgs& a) { a.index_head_dim = 64; },
       "index_head_dim must be a power of two and a multiple of 128"},
      {"rope vs index", [](ModelArgs& a) { a.qk_rope_head_dim = 256; a.index_head_dim = 128; },
       "qk_rope_head_dim must be <= index_head_dim"},
      {"fp8 dims", [](ModelArgs& a) { a.dtype = dsv32::WeightDType::fp8; }, "dtype fp8 needs dim, q_lora_rank"},
      {"runtime", [](ModelArgs& a) { a.runtime.max_seq_len = 0; }, "max_seq_len must be in [1, 16777216], got 0"},
  };
  CHECK_NOTHROW(ModelArgs::of<dsv32::TinyBf16>().validate());
  CHECK_NOTHROW(ModelArgs::of<dsv32::Config671B>().validate());
  for (const Case& c : cases) {
    CAPTURE(c.what);
    ModelArgs a = ModelArgs::of<dsv32::TinyBf16>();
    c.breakit(a);
    const std::string w = error_of([&] { a.validate("cfg.json"); }, ErrorKind::invalid_config);
    CHECK(contains(w, c.message));
    // shape invariants name the source; runtime options are checked by RuntimeOptions::validate
    if (std::string(c.what) != "runtime") CHECK(contains(w, std::string("cfg.json: ") + c.message));
  }
}

TEST_CASE("RuntimeOptions: validation and the YaRN switch") {
  dsv32::RuntimeOptions o;
  CHECK_NOTHROW(o.validate());
  CHECK(o.yarn());  // 16384 > 4096
  o.max_seq_len = 4096;
  CHECK_FALSE(o.yarn());
  o.max_seq_len = 4097;
  CHECK(o.yarn());

  struct Case {
    std::function<void(dsv32::RuntimeOptions&)> breakit;
    const char* message;
  };
  const Case cases[] = {
      {[](auto& r) { r.max_batch_size = 0; }, "max_batch_size must be in [1, 65536], got 0"},
      {[](auto& r) { r.max_seq_len = -3; }, "max_seq_len must be in [1, 16777216], got -3"},
      {[](auto& r) { r.original_seq_len = 0; }, "original_seq_len must be in [1, 16777216], got 0"},
      {[](auto& r) { r.rope_theta = 1.0; }, "rope_theta must be > 1, got 1"},
      {[](auto& r) { r.rope_theta = INFINITY; }, "rope_theta must be > 1"},
      {[](auto& r) { r.rope_factor = 0.0; }, "rope_factor must be > 0, got 0"},
      {[](auto& r) { r.rope_factor = NAN; }, "rope_factor must be > 0"},
      {[](auto& r) { r.beta_fast = 0; }, "beta_fast and beta_slow must be in [1, 16777216], got 0 and 1"},
      {[](auto& r) { r.beta_slow = -1; }, "beta_fast and beta_slow must be in [1, 16777216], got 32 and -1"},
      {[](auto& r) { r.mscale = NAN; }, "mscale must be finite"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    dsv32::RuntimeOptions r;
    c.breakit(r);
    CHECK(contains(error_of([&] { r.validate(); }, ErrorKind::invalid_config), c.message));
  }
}
