// Golden replays: every scenario of tests/data/golden (copied from the reference's vectors) replayed
// call by call through dsv32::testing::replay_golden, checked against the acceptance tolerances:
// logits within 1e-3 of max |logit|, identical visible indexer picks, identical experts with gate
// weights within 1e-3, prefill intermediates within 2e-2. On top of that, what is exact today is
// asserted bit for bit (check_scenario_exact): 34 of the 35 calls' logits and every prefill
// intermediate; the gate weights and one call stay at a tolerance, for the reason written there. The
// absorbed prefills against the oracle: bit for bit in two of the three scenarios (why not the third:
// written there).
#include <doctest/doctest.h>

#include <dsv32/dsv32.hpp>
#include <dsv32/testing/golden.hpp>
#include <dsv32/testing/host_invisible.hpp>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/bit_diff.hpp"
#include "support/test_support.hpp"

namespace {

using dsv32::test::bit_diff;
using dsv32::test::BitDiff;
using dsv32::test::kGoldenDir;
using dsv32::test::ulps;

template <class Config, class Backend = dsv32::Cpu>
void check_scenario(const std::string& name, const std::function<void(dsv32::ExecutionContext<Backend>&)>& setup = {}) {
  const auto report = dsv32::testing::replay_golden<Config, Backend>(kGoldenDir + name, {}, {}, setup);
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

// The one call whose logits are not bit-identical: tiny_fp8_ue8m0_yarn's call 6 (a decode step),
// which keeps the 1e-3 acceptance tolerance. Why exactness is out of reach there: the reference's
// RMSNorm takes the mean of squares in f32 as a torch reduction (`x.pow(2).mean(-1)`), summed in
// torch's order, which the numerics list cannot pin down. In that call, layer 2, token 0, its mean
// over the 256 values is 1 ulp below the correctly rounded one, and one bf16 value of ffn_norm's
// output (the MoE's input) comes out the other way; the MoE's output then differs in 8 of its 256
// values, by one bf16 ulp each, which moves the logits by ~1e-4 of max |logit|. Measured against the
// oracle's trace of that call: the layer's attention output, residual and every indexer pick are
// bit-identical, and the oracle's MoE run on ffn_norm's output with the correctly rounded mean gives
// our MoE output bit for bit. Should that call become exact, the check says so: move it to the exact
// calls.
bool logits_exact_today(const std::string& scenario, std::size_t call) {
  return !(scenario == "tiny_fp8_ue8m0_yarn" && call == 6);
}
// The gate weights' bound, in f32 ulps: the reference's gate scores are an f32 matmul
// (`x.float() @ W.float()^T`) summed in torch's order (in that call, 22 of the 32 scores differ from
// the correctly rounded dot products, which moves the normalized weights by an ulp); measured: at
// most 2 ulps, in 10 of the 472 prefill weights of the four scenarios, with every prefill output exact.
constexpr std::int64_t kGateWeightUlps = 4;

// Every call of a scenario replayed again, asserting bit-identity where the tolerance replay above
// only bounds the error: each call's logits (34 of the 35 calls of the four scenarios: all but the
// one logits_exact_today() names), and for the prefill every intermediate the vectors hold (the
// embedding, each layer's attention output, FFN output and residual). Every MoE layer's gate weights
// (f32, the same experts in any order) within kGateWeightUlps.
template <class Config, class Backend = dsv32::Cpu>
void check_scenario_exact(const std::string& name) {
  const std::filesystem::path dir = kGoldenDir + name;
  const dsv32::ModelArgs args = dsv32::ModelArgs::from_file(dir / "config.json");
  dsv32::Transformer<Config, Backend> model(args.runtime);
  dsv32::load_checkpoint(model, dir / "model0-mp1.safetensors");
  std::ifstream in(dir / "manifest.json");
  const auto manifest = nlohmann::json::parse(in);
  const auto expected = dsv32::SafetensorsFile::open(dir / "expected.safetensors");
  using dsv32::testing::detail::read_f32;
  using dsv32::testing::detail::read_i64;
  std::size_t index = 0, exact_calls = 0;
  for (const auto& call : manifest.at("calls")) {
    const auto tokens = call.at("tokens").get<std::vector<std::vector<std::int32_t>>>();
    dsv32::testing::detail::Recorder rec;
    rec.prefill_details = index == 0;
    const dsv32::Logits logits =
        model.forward(tokens, call.at("start_pos").get<std::int64_t>(), dsv32::ForwardOptions{false, &rec});
    const std::string step = "step" + std::to_string(index);
    const BitDiff d = bit_diff(logits.values, read_f32(*expected, step + ".logits"));
    if (logits_exact_today(name, index)) {
      CHECK_MESSAGE(d.identical(), d.describe(name + " " + step + ".logits"));
    } else {  // at the 1e-3 tolerance (check_scenario), for the reason above
      MESSAGE(d.describe(name + " " + step + ".logits") << " (within the tolerance, see logits_exact_today)");
      CHECK_MESSAGE(!d.identical(), name, " ", step, " is now bit-identical: drop it from logits_exact_today()");
    }
    exact_calls += d.identical();
    if (index == 0) {
      std::int64_t compared = 0;
      for (const auto& entry : rec.activations) {  // no structured binding: clang 14 cannot capture one
        const std::string& key = entry.first;
        const auto& ours = entry.second;
        const BitDiff a = bit_diff(ours, read_f32(*expected, key));
        CHECK_MESSAGE(a.identical(), a.describe(name + " " + key));
        ++compared;
      }
      CHECK(compared == 1 + 3 * Config::n_layers);
      for (const auto& entry : rec.gate_weights) {
        const auto layer = entry.first;
        const auto& ours_w = entry.second;
        const std::string base = "prefill.layers." + std::to_string(layer);
        const auto ref_e = read_i64(*expected, base + ".gate_indices");
        const auto ref_w = read_f32(*expected, base + ".gate_weights");
        const auto& ours_e = rec.gate_experts[layer];
        REQUIRE(ours_e.size() == ref_e.size());
        // the reference's weights reordered as ours (the same experts: checked by the replay above)
        std::vector<float> want(ours_w.size(), std::nanf(""));
        const std::size_t k = static_cast<std::size_t>(rec.gate_k);
        for (std::size_t r = 0; r < ours_e.size() / k; ++r)
          for (std::size_t j = 0; j < k; ++j)
            for (std::size_t i = 0; i < k; ++i)
              if (ref_e[r * k + i] == ours_e[r * k + j]) want[r * k + j] = ref_w[r * k + i];
        std::int64_t worst = 0;
        for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, ulps(ours_w[i], want[i]));
        CHECK_MESSAGE(worst <= kGateWeightUlps, bit_diff(ours_w, want).describe(name + " " + base + ".gate_weights"),
                      "; ", worst, " ulps apart");
      }
    }
    ++index;
  }
  MESSAGE(name << " on " << std::string(Backend::name) << ": " << exact_calls << " of " << index
               << " calls' logits bit-identical");
}

}  // namespace

TEST_CASE("golden: the calls that are exact today are bit-identical to the reference") {
  check_scenario_exact<dsv32::TinyBf16>("tiny_bf16");
  check_scenario_exact<dsv32::TinyBf16RopeInterleaved>("tiny_bf16_rope_interleaved");
  check_scenario_exact<dsv32::TinyFp8Ue8m0Yarn>("tiny_fp8_ue8m0_yarn");
  check_scenario_exact<dsv32::TinyFp8PlainScale>("tiny_fp8_plain_scale");
}
TEST_CASE("golden on HostInvisible: the calls that are exact today are bit-identical to the reference") {
  using dsv32::testing::HostInvisible;
  check_scenario_exact<dsv32::TinyBf16, HostInvisible>("tiny_bf16");
  check_scenario_exact<dsv32::TinyBf16RopeInterleaved, HostInvisible>("tiny_bf16_rope_interleaved");
  check_scenario_exact<dsv32::TinyFp8Ue8m0Yarn, HostInvisible>("tiny_fp8_ue8m0_yarn");
  check_scenario_exact<dsv32::TinyFp8PlainScale, HostInvisible>("tiny_fp8_plain_scale");
}

TEST_CASE("golden: tiny_bf16") { check_scenario<dsv32::TinyBf16>("tiny_bf16"); }
TEST_CASE("golden: tiny_bf16_rope_interleaved") {
  check_scenario<dsv32::TinyBf16RopeInterleaved>("tiny_bf16_rope_interleaved");
}
TEST_CASE("golden: tiny_fp8_ue8m0_yarn") { check_scenario<dsv32::TinyFp8Ue8m0Yarn>("tiny_fp8_ue8m0_yarn"); }
TEST_CASE("golden: tiny_fp8_plain_scale") { check_scenario<dsv32::TinyFp8PlainScale>("tiny_fp8_plain_scale"); }

// The optional FP8 fast mode (f32 block sums in the prefill-sized products) against the same
// vectors: no longer bit-exact, but within the acceptance tolerances with identical decisions.
TEST_CASE("golden: the FP8 scenarios in the fast accumulation mode, at the acceptance tolerances") {
  const std::function<void(dsv32::ExecutionContext<dsv32::Cpu>&)> fast = [](dsv32::ExecutionContext<dsv32::Cpu>& ctx) {
    ctx.kernels.fp8 = dsv32::cpu::Fp8Accumulation::fast;
  };
  check_scenario<dsv32::TinyFp8Ue8m0Yarn>("tiny_fp8_ue8m0_yarn", fast);
  check_scenario<dsv32::TinyFp8PlainScale>("tiny_fp8_plain_scale", fast);
}

// Every prefill on the absorbed path (RuntimeOptions::absorbed_prefill_from = 0: the reference's decode
// arithmetic). Expected: tests/data/absorbed, the prompt fed token by token through the independent
// oracle's decode path (make_absorbed.py there), every position's logits: bit-identical in tiny_bf16
// and tiny_fp8_plain_scale, within 1e-3 in tiny_fp8_ue8m0_yarn (why: below). Reported: how far that is
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
    // Bit-identical, except in tiny_fp8_ue8m0_yarn, which keeps the tolerance above: there, at position
    // 8 of sequence 0, every layer's output (attention, FFN, residual) is bit-identical to the oracle's
    // decode, but the final RMSNorm's f32 mean of squares over 256 values is a reduction torch sums in
    // its own order (1 ulp below the correctly rounded mean there), which flips one bf16 value of the
    // normalized state: 503 of that row's 512 logits move, by at most 1.9e-4 (5.6e-5 of max |logit|).
    const BitDiff exact = bit_diff(ours.values, oracle);
    if (name != "tiny_fp8_ue8m0_yarn") {
      CHECK_MESSAGE(exact.identical(), exact.describe(name + " absorbed prefill logits"));
    } else {
      MESSAGE(exact.describe(name + " absorbed prefill logits") << " (within the tolerance: see above)");
      CHECK_MESSAGE(!exact.identical(), name, " is now bit-identical: assert it");
    }
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
