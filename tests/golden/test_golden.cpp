// Golden replays: every scenario of tests/data/golden (copied from the reference's vectors) replayed
// call by call through dsv32::testing::replay_golden, checked against the acceptance tolerances:
// logits within 1e-3 of max |logit|, identical visible indexer picks, identical experts with gate
// weights within 1e-3, prefill intermediates within 2e-2.
#include <doctest/doctest.h>

#include <dsv32/dsv32.hpp>
#include <dsv32/testing/golden.hpp>
#include <dsv32/testing/host_invisible.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/test_support.hpp"

namespace {

using dsv32::test::kGoldenDir;

template <class Config, class Backend = dsv32::Cpu>
void check_scenario(const std::string& name) {
  const auto report = dsv32::testing::replay_golden<Config, Backend>(kGoldenDir + name);
  INFO(report.summary());
  REQUIRE(!report.calls.empty());
  for (const auto& call : report.calls) {
    CAPTURE(call.index);
    CHECK(call.logits_error <= 1e-3);
    CHECK(call.topk_queries == call.batch * call.seq * Config::n_layers);  // every layer's picks of every query
    CHECK(call.topk_mismatches == 0);
    CHECK(call.gate_mismatches == 0);
    CHECK(call.gate_weight_error <= 1e-3);
    CHECK(call.intermediate_error <= 2e-2);
    CHECK(call.missing.empty());  // nothing the vectors hold went unreported
    CHECK(call.extra.empty());
  }
  // the prefill compared every intermediate (the embedding, and each layer's attention output, FFN
  // output and residual) and every MoE layer's routing of every token
  const auto& prefill = report.calls[0];
  CHECK(prefill.intermediates == 1 + 3 * Config::n_layers);
  CHECK(prefill.gate_layers == Config::n_layers - Config::n_dense_layers);
  CHECK(prefill.gate_rows == prefill.gate_layers * prefill.batch * prefill.seq);
  CHECK_FALSE(prefill.worst_intermediate.empty());
  CHECK(report.passed());
  MESSAGE(name << " on " << std::string(Backend::name) << ": worst logits error " << report.max_logits_error());
}

}  // namespace

TEST_CASE("golden: tiny_bf16") { check_scenario<dsv32::TinyBf16>("tiny_bf16"); }
TEST_CASE("golden: tiny_bf16_rope_interleaved") {
  check_scenario<dsv32::TinyBf16RopeInterleaved>("tiny_bf16_rope_interleaved");
}
TEST_CASE("golden: tiny_fp8_ue8m0_yarn") { check_scenario<dsv32::TinyFp8Ue8m0Yarn>("tiny_fp8_ue8m0_yarn"); }
TEST_CASE("golden: tiny_fp8_plain_scale") { check_scenario<dsv32::TinyFp8PlainScale>("tiny_fp8_plain_scale"); }

// The optional FP8 fast mode (f32 block sums in the prefill-sized products) against the same
// vectors: no longer bit-exact, but within the acceptance tolerances with identical decisions.
TEST_CASE("golden: the FP8 scenarios in the fast accumulation mode, at the acceptance tolerances") {
  const auto previous = dsv32::cpu::set_fp8_accumulation(dsv32::cpu::Fp8Accumulation::fast);
  check_scenario<dsv32::TinyFp8Ue8m0Yarn>("tiny_fp8_ue8m0_yarn");
  check_scenario<dsv32::TinyFp8PlainScale>("tiny_fp8_plain_scale");
  dsv32::cpu::set_fp8_accumulation(previous);
}

// Every prefill on the absorbed path (RuntimeOptions::absorbed_prefill_from = 0: the reference's decode
// arithmetic). Expected: tests/data/absorbed, the prompt fed token by token through the independent
// oracle's decode path (make_absorbed.py there), every position's logits. Reported: how far that is
// from the reference's expanded prefill (the golden vectors), which the absorbed path is not meant to
// reproduce (in FP8, decode multiplies by the dequantized wkv_b without quantizing its input).
TEST_CASE("golden: prefills on the absorbed path equal the oracle's token-by-token decode") {
  auto check = [&]<class Config>(const std::string& name) {
    CAPTURE(name);
    const std::filesystem::path dir = kGoldenDir + name;
    const dsv32::ModelArgs args = dsv32::ModelArgs::from_file(dir / "config.json");
    dsv32::RuntimeOptions runtime = args.runtime;
    runtime.absorbed_prefill_from = 0;
    dsv32::Transformer<Config> model(runtime);
    dsv32::load_checkpoint(model, dir / "model0-mp1.safetensors");
    std::ifstream in(dir / "manifest.json");
    const auto manifest = nlohmann::json::parse(in);
    const auto tokens = manifest.at("calls").at(0).at("tokens").get<std::vector<std::vector<std::int32_t>>>();
    REQUIRE(manifest.at("calls").at(0).at("start_pos").get<std::int64_t>() == 0);
    const dsv32::Logits ours = model.forward(tokens, 0, {.all_positions = true});

    const auto expected = dsv32::SafetensorsFile::open(std::string(DSV32_TEST_DATA) + "/absorbed/" + name + ".safetensors");
    const auto oracle = dsv32::testing::detail::read_f32(*expected, "logits");
    REQUIRE(oracle.size() == ours.values.size());
    const std::int64_t V = Config::vocab_size, B = ours.batch, S = ours.positions;
    const dsv32::testing::detail::RowAgreement agree = dsv32::testing::detail::compare_rows(ours, oracle);
    const double worst = agree.worst;
    const std::int64_t argmax_differs = agree.argmax_differs;
    // and the last position against the reference's expanded prefill
    const auto golden = dsv32::SafetensorsFile::open(dir / "expected.safetensors");
    const auto prefill = dsv32::testing::detail::read_f32(*golden, "step0.logits");
    REQUIRE(prefill.size() == static_cast<std::size_t>(B * V));
    double vs_golden = 0.0, golden_mag = 0.0;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t v = 0; v < V; ++v) {
        vs_golden = std::max(vs_golden, std::fabs(static_cast<double>(ours.row(b, S - 1)[v]) - prefill[b * V + v]));
        golden_mag = std::max(golden_mag, std::fabs(static_cast<double>(prefill[b * V + v])));
      }
    MESSAGE(name << ": absorbed prefill vs the oracle's token-by-token decode: worst logits error " << worst
                 << " of max |logit| over " << B * S << " positions; vs the reference's (expanded) prefill: "
                 << vs_golden / golden_mag);
    CHECK(worst <= 1e-3);
    CHECK(argmax_differs == 0);
  };
  check.operator()<dsv32::TinyBf16>("tiny_bf16");
  check.operator()<dsv32::TinyFp8Ue8m0Yarn>("tiny_fp8_ue8m0_yarn");
  check.operator()<dsv32::TinyFp8PlainScale>("tiny_fp8_plain_scale");
}

// The same replays on a backend whose memory the host cannot read: every observer sees host copies,
// and nothing in forward() touches backend memory from the host (it would crash).
using dsv32::testing::HostInvisible;
TEST_CASE("golden on HostInvisible: tiny_bf16") { check_scenario<dsv32::TinyBf16, HostInvisible>("tiny_bf16"); }
TEST_CASE("golden on HostInvisible: tiny_bf16_rope_interleaved") {
  check_scenario<dsv32::TinyBf16RopeInterleaved, HostInvisible>("tiny_bf16_rope_interleaved");
}
TEST_CASE("golden on HostInvisible: tiny_fp8_ue8m0_yarn") {
  check_scenario<dsv32::TinyFp8Ue8m0Yarn, HostInvisible>("tiny_fp8_ue8m0_yarn");
}
TEST_CASE("golden on HostInvisible: tiny_fp8_plain_scale") {
  check_scenario<dsv32::TinyFp8PlainScale, HostInvisible>("tiny_fp8_plain_scale");
}

TEST_CASE("golden: a scenario replayed with the wrong compiled config is refused, naming the fields") {
  try {
    dsv32::testing::replay_golden<dsv32::TinyBf16>(kGoldenDir + "tiny_fp8_plain_scale");
    FAIL("expected an error");
  } catch (const dsv32::Error& e) {
    const std::string what = e.what();
    CHECK(e.kind() == dsv32::ErrorKind::invalid_config);
    CHECK(what.find("dim: config.json has 256") != std::string::npos);
    CHECK(what.find("dtype: config.json has \"fp8\"") != std::string::npos);
  }
}
