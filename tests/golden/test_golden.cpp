// Golden replays: every scenario of tests/data/golden (copied from the reference's vectors) replayed
// call by call through dsv32::testing::replay_golden, checked against the acceptance tolerances:
// logits within 1e-3 of max |logit|, identical visible indexer picks, identical experts with gate
// weights within 1e-3, prefill intermediates within 2e-2.
#include <doctest/doctest.h>

#include <dsv32/dsv32.hpp>
#include <dsv32/testing/golden.hpp>
#include <dsv32/testing/host_invisible.hpp>

#include <string>

namespace {

const std::string kGolden = std::string(DSV32_TEST_DATA) + "/golden/";

template <class Config, class Backend = dsv32::Cpu>
void check_scenario(const std::string& name) {
  const auto report = dsv32::testing::replay_golden<Config, Backend>(kGolden + name);
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
    dsv32::testing::replay_golden<dsv32::TinyBf16>(kGolden + "tiny_fp8_plain_scale");
    FAIL("expected an error");
  } catch (const dsv32::Error& e) {
    const std::string what = e.what();
    CHECK(e.kind() == dsv32::ErrorKind::invalid_config);
    CHECK(what.find("dim: config.json has 256") != std::string::npos);
    CHECK(what.find("dtype: config.json has \"fp8\"") != std::string::npos);
  }
}
