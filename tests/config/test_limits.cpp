// The limits a config.json read from an untrusted file must respect (ModelArgs::validate,
// RuntimeOptions::validate): every shape field, the parameter count and the cache size stay far
// inside 64-bit arithmetic, so count_params(), dsv32-inspect and the memory plan cannot overflow.
// Includes the inputs kept from fuzzing (fuzz/regressions/config/).
#include "dsv32/config/model_args.hpp"
#include "dsv32/config/presets.hpp"
#include "dsv32/io/checkpoint.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>

#include "support/test_support.hpp"

namespace {

using dsv32::ErrorKind;
using dsv32::ModelArgs;
using dsv32::test::check_error;

ModelArgs released() { return ModelArgs::from_file(std::string(DSV32_TEST_DATA) + "/configs/config_671B_v3.2.json"); }

}  // namespace

TEST_CASE("limits: the released config is well inside them") {
  const ModelArgs a = released();
  a.validate();
  CHECK(ModelArgs::parameter_bound(a) >= static_cast<double>(dsv32::count_params(a).total));
  CHECK(ModelArgs::parameter_bound(a) < ModelArgs::kMaxParameters / 1000);
}

TEST_CASE("limits: a shape field beyond 2^24 is refused, naming it (fuzz regression: vocab_size 2^63 - 1)") {
  // fuzz/regressions/config/vocab_size_int64_max.json: count_params() multiplied it by dim (signed
  // overflow, undefined behaviour) before validate() had an upper bound.
  const std::string file = std::string(DSV32_FUZZ_REGRESSIONS) + "/config/vocab_size_int64_max.json";
  const ModelArgs a = dsv32::read_model_config(file);
  CHECK(a.vocab_size == INT64_MAX);
  check_error([&] { a.validate(file); }, ErrorKind::invalid_config,
              {file, "vocab_size is 9223372036854775807, more than the 16777216 dsv32 accepts for a shape field"});
  for (const char* key : {"dim", "inter_dim", "n_layers", "n_heads", "index_topk", "kv_lora_rank"}) {
    nlohmann::json j = released().to_json();
    j[key] = (std::int64_t{1} << 24) + 1;
    const ModelArgs b = ModelArgs::from_json(j, "config.json");
    check_error([&] { b.validate("config.json"); }, ErrorKind::invalid_config,
                {"config.json: ", std::string(key) + " is 16777217, more than the 16777216"});
  }
}

TEST_CASE("limits: an integer past INT64_MAX is refused, not wrapped (fuzz regression: vocab_size 2^63)") {
  // fuzz/regressions/config/vocab_size_2_pow_63.json: the value was read as -2^63, whose negation in
  // ModelArgs::parameter_bound() overflowed (undefined behaviour) before validate() could refuse it.
  const std::string file = std::string(DSV32_FUZZ_REGRESSIONS) + "/config/vocab_size_2_pow_63.json";
  check_error([&] { dsv32::read_model_config(file); }, ErrorKind::invalid_config,
              {file, "field \"vocab_size\" must be an integer below 2^63, found number 9223372036854775808"});
  nlohmann::json hf = dsv32::to_hf_config(released());
  hf["vocab_size"] = std::uint64_t{1} << 63;  // the Hugging Face naming's reader, the same way
  check_error([&] { dsv32::parse_hf_config(hf, "hf.json"); }, ErrorKind::invalid_config, {"hf.json", "vocab_size"});
  // and a negative extreme is refused by validate() without overflowing on the way
  ModelArgs a = released();
  a.vocab_size = INT64_MIN;
  CHECK(ModelArgs::parameter_bound(a) > ModelArgs::kMaxParameters);
  check_error([&] { a.validate("c.json"); }, ErrorKind::invalid_config, {"c.json", "parameters, more than"});
}

TEST_CASE("limits: fields each within bounds whose product of parameters is not are refused") {
  ModelArgs a = released();
  a.dim = 1 << 20;        // each well below 2^24, but the dense MLPs alone hold
  a.inter_dim = 1 << 23;  // 3 x dim x inter_dim x 61 layers = 1.6e15 parameters
  check_error([&] { a.validate("big.json"); }, ErrorKind::invalid_config,
              {"big.json: the config describes about ", "parameters, more than the 1.1259e+15 dsv32 accepts"});
}

TEST_CASE("limits: runtime options (serving limits from config.json) are bounded") {
  dsv32::RuntimeOptions o;
  o.validate();
  o.max_seq_len = (std::int64_t{1} << 24) + 1;
  check_error([&] { o.validate("c.json"); }, ErrorKind::invalid_config,
              {"c.json: max_seq_len must be in [1, 16777216], got 16777217"});
  o.max_seq_len = std::int64_t{1} << 24;
  o.validate();
  o.max_batch_size = 1 << 16;  // each within bounds, together 2^40 cached positions
  check_error([&] { o.validate("c.json"); }, ErrorKind::invalid_config,
              {"max_batch_size x max_seq_len = 1099511627776 cached positions, more than the 4294967296 accepted"});
  o = {};
  o.max_batch_size = INT64_MAX;
  check_error([&] { o.validate("c.json"); }, ErrorKind::invalid_config,
              {"max_batch_size must be in [1, 65536], got 9223372036854775807"});
  o = {};
  o.beta_fast = INT64_MAX;
  check_error([&] { o.validate("c.json"); }, ErrorKind::invalid_config, {"beta_fast and beta_slow must be in [1, 16777216]"});
  // and through config.json
  nlohmann::json j = released().to_json();
  j["max_seq_len"] = 1000000000000;
  check_error([&] { (void)ModelArgs::from_json(j, "serving.json"); }, ErrorKind::invalid_config,
              {"serving.json: max_seq_len must be in [1, 16777216], got 1000000000000"});
}
