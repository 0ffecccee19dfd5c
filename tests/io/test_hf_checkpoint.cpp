// Tests of dsv32/io/hf_checkpoint.hpp and the Hugging Face side of dsv32/io/checkpoint.hpp: the
// config.json mapping (checked on the released model's config), the tensor name table, sharded
// checkpoints built at test time from the golden scenarios (same logits as the golden file, weights
// borrowed from the mappings, MTP layers skipped), and every kind of bad checkpoint.
#include <dsv32/dsv32.hpp>
#include <dsv32/io/checkpoint.hpp>
#include <dsv32/io/hf_checkpoint.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/hf_test_support.hpp"
#include "support/test_support.hpp"

using dsv32::test::check_error;

namespace {

namespace fs = std::filesystem;
using dsv32::DType;
using dsv32::ErrorKind;
using dsv32::ModelArgs;
using dsv32_test::TempDir;

const fs::path kData = DSV32_TEST_DATA;
const fs::path kGolden = dsv32::test::kGoldenDir;
const fs::path kHfConfig671B = kData / "configs" / "hf_config_DeepSeek-V3.2-Exp.reconstructed.json";


nlohmann::json released_hf_config() { return dsv32_test::read_json(kHfConfig671B); }

// -------------------------------------------------------------------------------------------- config.json

TEST_CASE("hf config: the released config.json reads as Config671B and as the reference's 671B config") {
  const dsv32::HfConfig c = dsv32::read_hf_config(kHfConfig671B);
  CHECK(c.args.mismatches<dsv32::Config671B>().empty());
  CHECK_NOTHROW(c.args.check_matches<dsv32::Config671B>());
  CHECK(c.ignored_keys.empty());
  CHECK(c.num_nextn_predict_layers == 1);
  CHECK(c.max_position_embeddings == 163840);
  CHECK(c.model_type == "deepseek_v32");

  // The reference's own config of the released model: every field (shapes, dtype, scale format and the
  // RoPE/YaRN scalars it leaves at their defaults) agrees; the serving limits keep ModelArgs' defaults.
  const ModelArgs ref = ModelArgs::from_file(kData / "configs" / "config_671B_v3.2.json");
  nlohmann::json mine = c.args.to_json(), theirs = ref.to_json();
  CHECK(c.args.resolved_gate_bias() == ref.resolved_gate_bias());
  mine.erase("gate_bias");
  theirs.erase("gate_bias");
  CHECK(mine == theirs);
  CHECK(c.args.runtime.max_seq_len == ModelArgs{}.runtime.max_seq_len);

  // to_hf_config() is its inverse, and writes the released file's values.
  const nlohmann::json back = dsv32::to_hf_config(c.args, 1);
  const nlohmann::json file = released_hf_config();
  for (auto it = back.begin(); it != back.end(); ++it) {
    CAPTURE(it.key());
    REQUIRE(file.contains(it.key()));
    if (it.key() == "rope_scaling" || it.key() == "quantization_config") {
      for (auto jt = it->begin(); jt != it->end(); ++jt) CHECK(file[it.key()][jt.key()] == *jt);
    } else {
      CHECK(file[it.key()] == *it);
    }
  }
  CHECK(dsv32::parse_hf_config(back).args.to_json() == c.args.to_json());
}

TEST_CASE("hf config: wrong types, unsupported values and unknown keys") {
  auto parse_with = [](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = released_hf_config();
    edit(j);
    return dsv32::parse_hf_config(j, "hf.json");
  };
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit, ErrorKind kind,
                     const std::vector<std::string>& parts) {
    check_error([&] { parse_with(edit); }, kind, parts);
  };

  SUBCASE("wrong types and missing fields name the field") {
    refused([](auto& j) { j["hidden_size"] = "7168"; }, ErrorKind::invalid_config,
            {"hf.json", "\"hidden_size\" must be an integer", "string"});
    refused([](auto& j) { j.erase("num_hidden_layers"); }, ErrorKind::invalid_config,
            {"missing field \"num_hidden_layers\"", "n_layers"});
    refused([](auto& j) { j["routed_scaling_factor"] = true; }, ErrorKind::invalid_config, {"routed_scaling_factor"});
    refused([](auto& j) { j["rope_scaling"]["factor"] = "40"; }, ErrorKind::invalid_config,
            {"\"rope_scaling.factor\" must be a number"});
    refused([](auto& j) { j["quantization_config"]["weight_block_size"] = 128; }, ErrorKind::invalid_config,
            {"quantization_config.weight_block_size"});
    refused([](auto& j) { j["tie_word_embeddings"] = 0; }, ErrorKind::invalid_config, {"tie_word_embeddings"});
    refused([](auto& j) { j["architectures"] = "DeepseekV32ForCausalLM"; }, ErrorKind::invalid_config,
            {"architectures", "array of strings"});
    refused([](auto& j) { j["num_attention_heads"] = 0; }, ErrorKind::invalid_config, {"n_heads"});
  }
  SUBCASE("unsupported quantization names the field and value") {
    refused([](auto& j) { j["quantization_config"]["fmt"] = "e5m2"; }, ErrorKind::unsupported,
            {"quantization_config.fmt", "e5m2"});
    refused([](auto& j) { j["quantization_config"]["weight_block_size"] = {64, 64}; }, ErrorKind::unsupported,
            {"quantization_config.weight_block_size", "[64,64]"});
    refused([](auto& j) { j["quantization_config"]["quant_method"] = "bitsandbytes"; }, ErrorKind::unsupported,
            {"quantization_config.quant_method", "bitsandbytes"});
    refused([](auto& j) { j["quantization_config"]["activation_scheme"] = "static"; }, ErrorKind::unsupported,
            {"quantization_config.activation_scheme", "static"});
    refused([](auto& j) { j["quantization_config"]["scale_fmt"] = "e8m0"; }, ErrorKind::unsupported,
            {"quantization_config.scale_fmt", "e8m0"});
    refused([](auto& j) { j["quantization_config"]["group_size"] = 32; }, ErrorKind::unsupported,
            {"quantization_config.group_size"});
  }
  SUBCASE("values that would change the model") {
    refused([](auto& j) { j["tie_word_embeddings"] = true; }, ErrorKind::unsupported, {"tie_word_embeddings", "true"});
    refused([](auto& j) { j["hidden_act"] = "gelu"; }, ErrorKind::unsupported, {"hidden_act", "gelu"});
    refused([](auto& j) { j["moe_layer_freq"] = 2; }, ErrorKind::unsupported, {"moe_layer_freq", "2"});
    refused([](auto& j) { j["attention_bias"] = true; }, ErrorKind::unsupported, {"attention_bias"});
    refused([](auto& j) { j["norm_topk_prob"] = false; }, ErrorKind::unsupported, {"norm_topk_prob", "sigmoid"});
    refused([](auto& j) { j["rms_norm_eps"] = 1e-5; }, ErrorKind::unsupported, {"rms_norm_eps"});
    refused([](auto& j) { j["rope_scaling"]["type"] = "linear"; }, ErrorKind::unsupported,
            {"rope_scaling.type", "linear"});
    refused([](auto& j) { j["rope_scaling"]["mscale"] = 0.707; }, ErrorKind::unsupported,
            {"rope_scaling.mscale", "mscale_all_dim"});
    refused([](auto& j) { j["topk_method"] = "greedy"; }, ErrorKind::unsupported, {"greedy", "n_group = 8"});
    refused([](auto& j) { j["topk_method"] = "random"; }, ErrorKind::unsupported, {"topk_method", "random"});
    refused([](auto& j) { j["q_lora_rank"] = nullptr; }, ErrorKind::unsupported, {"q_lora_rank"});
  }
  SUBCASE("routing, quantization and RoPE variants map to the matching fields") {
    const auto greedy = parse_with([](auto& j) { j["topk_method"] = "group_limited_greedy"; });
    CHECK_FALSE(greedy.args.resolved_gate_bias());
    check_error([&] { greedy.args.check_matches<dsv32::Config671B>(); }, ErrorKind::invalid_config,
                {"gate_bias: config.json has false"});
    const auto bf16 = parse_with([](auto& j) { j.erase("quantization_config"); });
    CHECK(bf16.args.dtype == dsv32::WeightDType::bf16);
    check_error([&] { bf16.args.check_matches<dsv32::Config671B>(); }, ErrorKind::invalid_config,
                {"2 field(s)", "dtype: config.json has \"bf16\"", "scale_fmt"});
    const auto plain = parse_with([](auto& j) { j["quantization_config"].erase("scale_fmt"); });
    CHECK(plain.args.scale_fmt == dsv32::ScaleFmt::none);
    const auto no_rope = parse_with([](auto& j) { j.erase("rope_scaling"); });
    CHECK(no_rope.args.runtime.rope_factor == 1.0);
    const auto rope_type = parse_with([](auto& j) {
      j["rope_scaling"].erase("type");
      j["rope_scaling"]["rope_type"] = "yarn";
      j["rope_scaling"]["mscale_all_dim"] = 0.707;
      j["rope_scaling"]["mscale"] = 0.707;
    });
    CHECK(rope_type.args.runtime.mscale == 0.707);
  }
  SUBCASE("unknown keys are ignored and listed") {
    const auto c = parse_with([](auto& j) {
      j["some_future_key"] = 1;
      j["another"] = {{"x", 1}};
    });
    CHECK(c.ignored_keys == std::vector<std::string>{"another", "some_future_key"});
    CHECK(c.args.mismatches<dsv32::Config671B>().empty());
  }
  SUBCASE("duplicate keys in the file are refused") {
    TempDir tmp("hfcfg");
    std::string text = released_hf_config().dump();
    text.insert(1, "\"hidden_size\": 1024, ");
    dsv32_test::write_text(tmp / "config.json", text);
    check_error([&] { dsv32::read_hf_config(tmp / "config.json"); }, ErrorKind::invalid_config,
                {"config.json", "hidden_size", "twice"});
  }
}

// -------------------------------------------------------------------------------------------- names

TEST_CASE("hf names: every golden tensor maps to Hugging Face's name and back, as convert.py renames") {
  for (const char* scenario : {"tiny_bf16", "tiny_fp8_ue8m0_yarn"}) {
    const auto f = dsv32::SafetensorsFile::open(kGolden / scenario / "model0-mp1.safetensors");
    for (const auto& t : f->tensors()) {
      CAPTURE(t.name);
      const std::string hf = dsv32::hf_name_from_dsv32(t.name);
      CHECK(dsv32::dsv32_name_from_hf(hf, 3) == t.name);
    }
  }
  const std::vector<std::pair<std::string, std::string>> table = {
      {"model.embed_tokens.weight", "embed.weight"},
      {"model.norm.weight", "norm.weight"},
      {"lm_head.weight", "head.weight"},
      {"model.layers.0.input_layernorm.weight", "layers.0.attn_norm.weight"},
      {"model.layers.0.post_attention_layernorm.weight", "layers.0.ffn_norm.weight"},
      {"model.layers.1.self_attn.q_a_proj.weight_scale_inv", "layers.1.attn.wq_a.scale"},
      {"model.layers.1.self_attn.q_a_layernorm.weight", "layers.1.attn.q_norm.weight"},
      {"model.layers.1.self_attn.q_b_proj.weight", "layers.1.attn.wq_b.weight"},
      {"model.layers.1.self_attn.kv_a_proj_with_mqa.weight", "layers.1.attn.wkv_a.weight"},
      {"model.layers.1.self_attn.kv_a_layernorm.weight", "layers.1.attn.kv_norm.weight"},
      {"model.layers.1.self_attn.kv_b_proj.weight", "layers.1.attn.wkv_b.weight"},
      {"model.layers.1.self_attn.o_proj.weight", "layers.1.attn.wo.weight"},
      {"model.layers.1.self_attn.indexer.wq_b.weight", "layers.1.attn.indexer.wq_b.weight"},
      {"model.layers.1.self_attn.indexer.wk.weight_scale_inv", "layers.1.attn.indexer.wk.scale"},
      {"model.layers.1.self_attn.indexer.k_norm.bias", "layers.1.attn.indexer.k_norm.bias"},
      {"model.layers.1.self_attn.indexer.weights_proj.weight", "layers.1.attn.indexer.weights_proj.weight"},
      {"model.layers.0.mlp.gate_proj.weight", "layers.0.ffn.w1.weight"},
      {"model.layers.0.mlp.down_proj.weight", "layers.0.ffn.w2.weight"},
      {"model.layers.0.mlp.up_proj.weight", "layers.0.ffn.w3.weight"},
      {"model.layers.60.mlp.gate.weight", "layers.60.ffn.gate.weight"},
      {"model.layers.60.mlp.gate.e_score_correction_bias", "layers.60.ffn.gate.bias"},
      {"model.layers.60.mlp.experts.255.down_proj.weight_scale_inv", "layers.60.ffn.experts.255.w2.scale"},
      {"model.layers.60.mlp.shared_experts.up_proj.weight", "layers.60.ffn.shared_experts.w3.weight"},
  };
  for (const auto& entry : table) {
    const auto& hf = entry.first;  // not structured bindings: CAPTURE's lambda takes them
    const auto& ds = entry.second;
    CAPTURE(hf);
    CHECK(dsv32::dsv32_name_from_hf(hf, 61) == ds);
    CHECK(dsv32::hf_name_from_dsv32(ds) == hf);
  }
  using dsv32::ShardKind;
  using dsv32::TensorSharding;
  CHECK(dsv32::tensor_sharding("embed.weight") == TensorSharding{ShardKind::split, 0});
  CHECK(dsv32::tensor_sharding("head.weight") == TensorSharding{ShardKind::split, 0});
  CHECK(dsv32::tensor_sharding("layers.0.attn.wq_b.scale") == TensorSharding{ShardKind::split, 0});
  CHECK(dsv32::tensor_sharding("layers.0.attn.indexer.wq_b.weight") == TensorSharding{});
  CHECK(dsv32::tensor_sharding("layers.0.attn.wo.scale") == TensorSharding{ShardKind::split, 1});
  CHECK(dsv32::tensor_sharding("layers.0.ffn.w2.weight") == TensorSharding{ShardKind::split, 1});
  CHECK(dsv32::tensor_sharding("layers.3.ffn.shared_experts.w1.weight") == TensorSharding{ShardKind::split, 0});
  CHECK(dsv32::tensor_sharding("layers.3.ffn.experts.7.w1.weight").kind == ShardKind::by_expert);
  CHECK(dsv32::tensor_sharding("layers.3.ffn.gate.bias") == TensorSharding{});
  CHECK(dsv32::tensor_sharding("layers.3.attn.wkv_a.weight") == TensorSharding{});

  // Multi-token-prediction layers (model.layers.N, N >= num_hidden_layers) are skipped, whatever they hold.
  CHECK_FALSE(dsv32::dsv32_name_from_hf("model.layers.61.eh_proj.weight", 61).has_value());
  CHECK_FALSE(dsv32::dsv32_name_from_hf("model.layers.61.shared_head.head.weight", 61).has_value());
  CHECK_FALSE(dsv32::dsv32_name_from_hf("model.layers.61.self_attn.q_a_proj.weight", 61).has_value());
  for (const char* bad : {"model.layers.60.eh_proj.weight", "model.layers.01.input_layernorm.weight",
                          "model.embed_tokens.bias", "layers.0.attn_norm.weight", "model.layers.0.mlp.experts.x.gate_proj.weight"})
    check_error([&] { dsv32::dsv32_name_from_hf(bad, 61); }, ErrorKind::invalid_file, {bad, "no dsv32 counterpart"});
  check_error([] { dsv32::hf_name_from_dsv32("layers.0.attn.nope.weight"); }, ErrorKind::invalid_argument,
              {"layers.0.attn.nope.weight"});
}

// -------------------------------------------------------------------------------------------- loading

// Runs the scenario's manifest calls on both models: logits bit-identical, and within the acceptance
// criterion (1e-3 of max |logit|) of the reference's.
template <class Config>
void check_same_logits(dsv32::Transformer<Config>& hf_model, dsv32::Transformer<Config>& golden_model,
                       const fs::path& scenario) {
  const nlohmann::json manifest = dsv32_test::read_json(scenario / "manifest.json");
  const auto expected = dsv32::SafetensorsFile::open(scenario / "expected.safetensors");
  std::size_t index = 0;
  for (const auto& call : manifest.at("calls")) {
    CAPTURE(index);
    const auto tokens = call.at("tokens").get<std::vector<std::vector<std::int32_t>>>();
    const std::int64_t start = call.at("start_pos").get<std::int64_t>();
    const dsv32::Logits a = hf_model.forward(tokens, start), b = golden_model.forward(tokens, start);
    CHECK(a.values == b.values);
    const dsv32::TensorInfo& ref = expected->at("step" + std::to_string(index) + ".logits");
    std::vector<float> want(static_cast<std::size_t>(ref.numel()));
    ref.read_as_f32(want.data());
    REQUIRE(want.size() == a.values.size());
    double err = 0, scale = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      err = std::max(err, std::fabs(static_cast<double>(a.values[i]) - want[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    }
    CHECK(err <= 1e-3 * scale);
    ++index;
  }
  CHECK(index > 1);
}

// Builds a 3-shard Hugging Face checkpoint of the scenario (with a fake MTP layer), loads it, and checks it
// against the golden file: same logits, weights borrowed from the shards' mappings, MTP tensors skipped.
template <class Config>
void check_golden_scenario(const std::string& scenario) {
  TempDir tmp("hf");
  const fs::path dir = tmp / "hf";
  constexpr std::int64_t L = Config::n_layers;  // the MTP layer's index
  const ModelArgs args = dsv32_test::hf_checkpoint_from_golden(
      kGolden / scenario, dir, 3,
      {dsv32_test::mtp_tensor(L, "embed_tokens.weight", {Config::vocab_size, Config::dim}),
       dsv32_test::mtp_tensor(L, "enorm.weight", {Config::dim}), dsv32_test::mtp_tensor(L, "hnorm.weight", {Config::dim}),
       dsv32_test::mtp_tensor(L, "eh_proj.weight", {Config::dim, 2 * Config::dim}),
       dsv32_test::mtp_tensor(L, "self_attn.q_a_proj.weight", {Config::q_lora_rank, Config::dim}),
       dsv32_test::mtp_tensor(L, "shared_head.head.weight", {Config::vocab_size, Config::dim})});

  // The checkpoint's config carries the shapes and RoPE scalars; the serving limits are the caller's.
  const dsv32::HfCheckpointSource source(dir);
  CHECK(source.shards().size() == 3);
  CHECK(source.skipped().size() == 6);
  CHECK(source.config().ignored_keys.empty());
  dsv32::RuntimeOptions options = source.config().args.runtime;
  options.max_batch_size = args.runtime.max_batch_size;
  options.max_seq_len = args.runtime.max_seq_len;
  CHECK(ModelArgs{args}.to_json() == [&] {
    ModelArgs a = source.config().args;
    a.runtime = options;
    a.gate_bias = args.gate_bias;
    return a.to_json();
  }());
  for (const auto& name : source.names()) CHECK(name.find("layers." + std::to_string(L)) == std::string::npos);

  CHECK(dsv32::detect_checkpoint_layout(dir) == dsv32::CheckpointLayout::hugging_face);
  dsv32::Transformer<Config> hf_model(options), golden_model(args.runtime);
  dsv32::load_checkpoint(hf_model, dir);
  dsv32::load_checkpoint(golden_model, kGolden / scenario / "model0-mp1.safetensors");
  // The same load through this source, to see where the parameters point.
  dsv32::Transformer<Config> direct(options);
  dsv32::load_weights(direct, source);
  std::map<std::string, bool> borrowed_by_dir;
  hf_model.visit([&](const std::string& name, dsv32::Parameter<dsv32::Cpu>& p) { borrowed_by_dir[name] = p.borrowed(); });

  // Loading borrows: every parameter stored in its own dtype (the FP8 and bf16 linears, the embedding,
  // aligned f32 scales) points into a shard's mapping; only widened tensors (bf16 norms -> f32) are copies.
  std::size_t borrowed = 0, fp8 = 0;
  direct.visit([&](const std::string& name, dsv32::Parameter<dsv32::Cpu>& p) {
    CAPTURE(name);
    const dsv32::TensorInfo* t = source.find(name);
    REQUIRE(t != nullptr);
    const bool aligned = reinterpret_cast<std::uintptr_t>(t->data) % dsv32::dtype_size(t->dtype) == 0;
    CHECK(p.borrowed() == (t->dtype == p.dtype() && aligned));
    CHECK(borrowed_by_dir.at(name) == p.borrowed());
    if (p.borrowed()) {
      ++borrowed;
      CHECK(static_cast<const void*>(p.data()) == static_cast<const void*>(t->data));
    }
    if (p.dtype() == DType::F8_E4M3) {
      ++fp8;
      CHECK(p.borrowed());
    }
  });
  CHECK(borrowed > 0);
  if constexpr (dsv32::ConfigTraits<Config>::fp8) CHECK(fp8 > 0);
  MESSAGE(scenario << ": " << borrowed << " parameters borrowed from the shards");

  check_same_logits(hf_model, golden_model, kGolden / scenario);
}

TEST_CASE("hf checkpoint: a sharded bf16 checkpoint loads like the golden file (tiny_bf16)") {
  check_golden_scenario<dsv32::TinyBf16>("tiny_bf16");
}

TEST_CASE("hf checkpoint: a sharded FP8 checkpoint with weight_scale_inv loads like the golden file "
          "(tiny_fp8_ue8m0_yarn)") {
  check_golden_scenario<dsv32::TinyFp8Ue8m0Yarn>("tiny_fp8_ue8m0_yarn");
}

TEST_CASE("hf checkpoint: topk_method group_limited_greedy (no gate bias) loads like the golden file "
          "(tiny_fp8_plain_scale)") {
  check_golden_scenario<dsv32::TinyFp8PlainScale>("tiny_fp8_plain_scale");
}

TEST_CASE("hf checkpoint: a single model.safetensors without index loads too") {
  TempDir tmp("hf1");
  const ModelArgs args = dsv32_test::hf_checkpoint_from_golden(kGolden / "tiny_bf16", tmp.path, 0);
  CHECK(fs::exists(tmp / "model.safetensors"));
  dsv32::Transformer<dsv32::TinyBf16> model(args.runtime);
  dsv32::load_checkpoint(model, tmp.path);
  CHECK(model.ready());
}

// -------------------------------------------------------------------------------------------- bad checkpoints

TEST_CASE("hf checkpoint: bad checkpoints are refused with clear errors") {
  TempDir tmp("hfbad");
  const fs::path dir = tmp / "hf";
  const fs::path scenario = kGolden / "tiny_bf16";
  const ModelArgs args = dsv32_test::hf_checkpoint_from_golden(scenario, dir, 3);
  const std::string s1 = dsv32_test::shard_name(0, 3), s2 = dsv32_test::shard_name(1, 3);
  const fs::path index = dir / dsv32::HfCheckpointSource::index_file_name();
  nlohmann::json idx = dsv32_test::read_json(index);
  const std::string in_s1 = [&] {  // a tensor the index puts in the first shard
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it)
      if (*it == s1) return it.key();
    return std::string();
  }();
  REQUIRE_FALSE(in_s1.empty());
  dsv32::Transformer<dsv32::TinyBf16> model(args.runtime);
  auto load = [&] { dsv32::load_checkpoint(model, dir); };

  // Rewrites the shard holding tensor `holding` with `edit` applied to its tensors, and the index to match.
  auto rewrite_shard = [&](const std::string& holding, const std::function<void(std::vector<dsv32_test::HfTensor>&)>& edit) {
    const fs::path p = dir / idx["weight_map"].at(holding).get<std::string>();
    std::vector<dsv32_test::HfTensor> ts;
    {
      const auto f = dsv32::SafetensorsFile::open(p);
      for (const auto& t : f->tensors()) {
        dsv32_test::HfTensor h{t.name, t.dtype, t.shape, std::vector<std::byte>(t.bytes())};
        t.copy_to(h.bytes.data());
        ts.push_back(std::move(h));
      }
    }
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end();)
      it = *it == p.filename().string() ? idx["weight_map"].erase(it) : std::next(it);
    edit(ts);
    dsv32::SafetensorsWriter w;
    for (const auto& t : ts) {
      w.add(t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
      idx["weight_map"][t.name] = p.filename().string();
    }
    w.write(p);
    dsv32_test::write_json(index, idx);
  };

  SUBCASE("a shard the index names is missing") {
    fs::remove(dir / s2);
    check_error(load, ErrorKind::io, {"model.safetensors.index.json", s2, "missing"});
  }
  SUBCASE("the index puts a tensor in the wrong shard") {
    idx["weight_map"][in_s1] = s2;
    dsv32_test::write_json(index, idx);
    check_error(load, ErrorKind::invalid_file, {in_s1, "puts tensor", s2, "but it is in " + s1});
  }
  SUBCASE("the index names a tensor no shard holds") {
    idx["weight_map"]["model.layers.0.self_attn.ghost.weight"] = s1;
    dsv32_test::write_json(index, idx);
    check_error(load, ErrorKind::invalid_file, {"model.layers.0.self_attn.ghost.weight", "does not hold it"});
  }
  SUBCASE("a shard holds a tensor the index does not name") {
    idx["weight_map"].erase(in_s1);
    dsv32_test::write_json(index, idx);
    check_error(load, ErrorKind::invalid_file, {in_s1, s1, "does not name it"});
  }
  SUBCASE("two shards hold the same tensor") {
    const std::string in_s2 = [&] {
      for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it)
        if (*it == s2) return it.key();
      return std::string();
    }();
    rewrite_shard(in_s2, [&](auto& ts) {
      const auto f = dsv32::SafetensorsFile::open(dir / s1);
      const auto& t = f->at(in_s1);
      dsv32_test::HfTensor h{t.name, t.dtype, t.shape, std::vector<std::byte>(t.bytes())};
      t.copy_to(h.bytes.data());
      ts.push_back(std::move(h));
    });
    check_error(load, ErrorKind::invalid_file, {in_s1, "two shards", s1, s2});
  }
  SUBCASE("a malformed index") {
    dsv32_test::write_text(index, "{\"weight_map\": ");
    check_error(load, ErrorKind::invalid_file, {"model.safetensors.index.json", "not valid JSON"});
    dsv32_test::write_json(index, {{"metadata", {}}});
    check_error(load, ErrorKind::invalid_file, {"no \"weight_map\""});
    dsv32_test::write_json(index, {{"weight_map", {{"lm_head.weight", 3}}}});
    check_error(load, ErrorKind::invalid_file, {"lm_head.weight", "expected a shard file name"});
    dsv32_test::write_json(index, {{"weight_map", {{"lm_head.weight", "../" + s1}}}});
    check_error(load, ErrorKind::invalid_file, {"lm_head.weight", "name of a file in the checkpoint directory"});
  }
  SUBCASE("the index names a shard the file system cannot look up (fuzz/regressions/hf_index)") {
    // a name past NAME_MAX: stat() fails with ENAMETOOLONG, which std::filesystem::exists() throws
    const std::string too_long = std::string(300, 'y') + ".safetensors";
    idx["weight_map"][in_s1] = too_long;
    dsv32_test::write_json(index, idx);
    check_error(load, ErrorKind::io, {"cannot examine ", (dir / too_long).string(), "File name too long"});
  }
  SUBCASE("a config.json that disagrees with the compiled config lists every field") {
    nlohmann::json c = dsv32_test::read_json(dir / "config.json");
    c["num_attention_heads"] = 4;
    c["vocab_size"] = 512;
    c["topk_method"] = "group_limited_greedy";
    dsv32_test::write_json(dir / "config.json", c);
    check_error(load, ErrorKind::invalid_config,
                {"config.json disagrees with the compiled config tiny_bf16 in 3 field(s)", "n_heads: config.json has 4",
                 "vocab_size: config.json has 512", "gate_bias: config.json has false"});
  }
  SUBCASE("unsupported quantization") {
    nlohmann::json c = dsv32_test::read_json(dir / "config.json");
    c["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e5m2"}, {"weight_block_size", {128, 128}}};
    dsv32_test::write_json(dir / "config.json", c);
    check_error(load, ErrorKind::unsupported, {"quantization_config.fmt", "e5m2"});
  }
  SUBCASE("no config.json") {
    fs::remove(dir / "config.json");
    check_error(load, ErrorKind::io, {"has no config.json"});
  }
  SUBCASE("a missing tensor") {
    rewrite_shard(in_s1, [&](auto& ts) { std::erase_if(ts, [&](const auto& t) { return t.name == in_s1; }); });
    check_error(load, ErrorKind::invalid_file,
                {"Hugging Face checkpoint directory", "missing tensor '" + *dsv32::dsv32_name_from_hf(in_s1, 3) + "'"});
  }
  SUBCASE("a tensor of the wrong dtype or shape") {
    const std::string wq_a = "model.layers.0.self_attn.q_a_proj.weight", wkv_b = "model.layers.0.self_attn.kv_b_proj.weight";
    const std::string wq_a_shard = idx["weight_map"][wq_a];
    rewrite_shard(wq_a, [&](auto& ts) {
      for (auto& t : ts)
        if (t.name == wq_a) {  // bf16 [64, 96] stored as f32
          t.dtype = DType::F32;
          t.bytes.resize(t.bytes.size() * 2);
        }
    });
    rewrite_shard(wkv_b, [&](auto& ts) {
      for (auto& t : ts)
        if (t.name == wkv_b) std::swap(t.shape[0], t.shape[1]);
    });
    check_error(load, ErrorKind::invalid_file,
                {"tensor 'layers.0.attn.wq_a.weight' has dtype F32, expected BF16 (from "
                 "model.layers.0.self_attn.q_a_proj.weight in " + wq_a_shard,
                 "tensor 'layers.0.attn.wkv_b.weight' has shape [32, 120], expected [120, 32]"});
    CHECK_FALSE(model.ready());
  }
  SUBCASE("a tensor whose name maps to nothing") {
    rewrite_shard(in_s1, [&](auto& ts) {
      ts.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", DType::F32, {4}, std::vector<std::byte>(16)});
    });
    check_error(load, ErrorKind::invalid_file,
                {s1, "model.layers.0.self_attn.rotary_emb.inv_freq", "no dsv32 counterpart"});
  }
  SUBCASE("a tensor the model does not have") {
    rewrite_shard(in_s1, [&](auto& ts) {
      ts.push_back({"model.layers.0.self_attn.q_a_proj.weight_scale_inv", DType::F32, {1, 1}, std::vector<std::byte>(4)});
    });
    check_error(load, ErrorKind::invalid_file, {"unexpected tensor 'layers.0.attn.wq_a.scale'"});
  }
  SUBCASE("a directory holding neither layout, or another world size's shards") {
    TempDir empty("hfnone");
    check_error([&] { dsv32::load_checkpoint(model, empty.path); }, ErrorKind::io,
                {"holds neither model0-mp1.safetensors", "model.safetensors.index.json"});
    dsv32_test::write_text(empty / "model0-mp2.safetensors", "");
    check_error([&] { dsv32::load_checkpoint(model, empty.path); }, ErrorKind::io, {"it has model0-mp2.safetensors"});
    check_error([&] { dsv32::load_checkpoint(model, empty / "nothing"); }, ErrorKind::io, {"does not exist"});
  }
}

}  // namespace
