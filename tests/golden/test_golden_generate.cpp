// Golden generation: each scenario's prompts through dsv32::generate (greedy, the manifest's
// max_new_tokens and eos) must make exactly the reference generator's forward calls (start_pos and
// tokens) and return its completions: final_tokens[b][len_b : len_b + max_new_tokens] (the
// reference's matrix also holds the greedy tokens it computed past a short prompt's completion).
#include <doctest/doctest.h>

#include <dsv32/dsv32.hpp>
#include <dsv32/generate/generate.hpp>
#include <dsv32/io/checkpoint.hpp>
#include <dsv32/serving/engine.hpp>
#include <dsv32/testing/host_invisible.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/test_support.hpp"

namespace {

using dsv32::test::kGoldenDir;

using Tokens = std::vector<std::int32_t>;

// Forwards to a model and records every call as the manifest lists them: start_pos, one token
// vector per sequence.
template <class Model>
struct RecordingModel {
  using config_type = typename Model::config_type;
  struct Call {
    std::int64_t start_pos;
    std::vector<Tokens> tokens;
  };

  Model& model;
  std::vector<Call> calls;

  const dsv32::RuntimeOptions& options() const { return model.options(); }
  void reset() { model.reset(); }
  bool ready() const { return model.ready(); }
  dsv32::Logits forward(std::span<const std::int32_t> tokens, std::int64_t batch, std::int64_t start_pos,
                        const dsv32::ForwardOptions& opts) {
    Call c{start_pos, {}};
    const std::size_t seq = tokens.size() / static_cast<std::size_t>(batch);
    for (std::int64_t b = 0; b < batch; ++b)
      c.tokens.emplace_back(tokens.begin() + static_cast<std::ptrdiff_t>(b * seq),
                            tokens.begin() + static_cast<std::ptrdiff_t>((b + 1) * seq));
    calls.push_back(std::move(c));
    return model.forward(tokens, batch, start_pos, opts);
  }
};

template <class Config, class Backend = dsv32::Cpu>
void check_generation(const std::string& name) {
  const auto dir = std::filesystem::path(kGoldenDir) / name;
  std::ifstream in(dir / "manifest.json");
  REQUIRE(in.good());
  const auto manifest = nlohmann::json::parse(in);
  const auto prompts = manifest.at("prompts").get<std::vector<Tokens>>();
  const auto final_tokens = manifest.at("final_tokens").get<std::vector<Tokens>>();
  REQUIRE(manifest.at("temperature").get<double>() == 0.0);

  const dsv32::ModelArgs args = dsv32::ModelArgs::from_file(dir / "config.json");
  dsv32::Transformer<Config, Backend> model(args.runtime);
  dsv32::load_checkpoint(model, dir / "model0-mp1.safetensors");
  RecordingModel<dsv32::Transformer<Config, Backend>> recorder{model, {}};

  dsv32::GenerateOptions opts;
  opts.max_new_tokens = manifest.at("max_new_tokens").get<std::int64_t>();
  opts.sampling.temperature = 0;
  if (!manifest.at("eos_id").is_null()) opts.eos_id = manifest.at("eos_id").get<std::int32_t>();
  const auto result = dsv32::generate(recorder, prompts, opts);

  REQUIRE(result.sequences.size() == prompts.size());
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    CAPTURE(b);
    const auto& row = final_tokens[b];
    const std::size_t begin = prompts[b].size();
    const std::size_t end = std::min(row.size(), begin + static_cast<std::size_t>(opts.max_new_tokens));
    CHECK(result.sequences[b].tokens == Tokens(row.begin() + static_cast<std::ptrdiff_t>(begin),
                                               row.begin() + static_cast<std::ptrdiff_t>(end)));
    CHECK(result.sequences[b].finish == dsv32::FinishReason::max_new_tokens);
  }
  const auto& calls = manifest.at("calls");
  REQUIRE(recorder.calls.size() == calls.size());
  for (std::size_t i = 0; i < calls.size(); ++i) {
    CAPTURE(i);
    CHECK(recorder.calls[i].start_pos == calls[i].at("start_pos").get<std::int64_t>());
    CHECK(recorder.calls[i].tokens == calls[i].at("tokens").get<std::vector<Tokens>>());
  }
  CHECK(result.stats.forward_calls == static_cast<std::int64_t>(calls.size()));
}

// The same prompts through the serving engine, all submitted at once with a small step budget (chunked
// prompts, several sequences per step, pages of 8 positions): each completion must be the reference's.
// The reference's generate() prefills every prompt up to the shortest one's length and feeds the rest
// one position per call; Request::prefill_positions = that length gives each position the same
// arithmetic, so the tokens are the reference's whatever the chunks and the company.
template <class Config, class Backend = dsv32::Cpu>
void check_engine_generation(const std::string& name) {
  const auto dir = std::filesystem::path(kGoldenDir) / name;
  std::ifstream in(dir / "manifest.json");
  REQUIRE(in.good());
  const auto manifest = nlohmann::json::parse(in);
  const auto prompts = manifest.at("prompts").get<std::vector<Tokens>>();
  const auto final_tokens = manifest.at("final_tokens").get<std::vector<Tokens>>();
  const dsv32::ModelArgs args = dsv32::ModelArgs::from_file(dir / "config.json");
  dsv32::Transformer<Config, Backend> model(args.runtime);
  dsv32::load_checkpoint(model, dir / "model0-mp1.safetensors");
  dsv32::EngineOptions eo;
  eo.cache_pages = 16;
  eo.page_size = 8;
  eo.max_running = 4;
  eo.step_tokens = 6;
  dsv32::Engine engine(model, eo);
  const std::int64_t max_new = manifest.at("max_new_tokens").get<std::int64_t>();
  std::size_t shortest = prompts[0].size();
  for (const Tokens& p : prompts) shortest = std::min(shortest, p.size());
  std::vector<dsv32::RequestHandle> handles;
  for (const Tokens& p : prompts) {
    dsv32::Request r;
    r.prompt = p;
    r.prefill_positions = static_cast<std::int64_t>(shortest);
    r.max_new_tokens = std::min<std::int64_t>(max_new, args.runtime.max_seq_len - static_cast<std::int64_t>(p.size()));
    r.sampling.temperature = 0;
    if (!manifest.at("eos_id").is_null()) r.stop_ids = {manifest.at("eos_id").get<std::int32_t>()};
    handles.push_back(engine.submit(r));
  }
  engine.run_until_idle();
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    CAPTURE(b);
    const auto& row = final_tokens[b];
    const std::size_t begin = prompts[b].size();
    const std::size_t end = std::min(row.size(), begin + static_cast<std::size_t>(max_new));
    CHECK(handles[b].wait().tokens == Tokens(row.begin() + static_cast<std::ptrdiff_t>(begin),
                                             row.begin() + static_cast<std::ptrdiff_t>(end)));
  }
  CHECK(engine.stats().pages_used == 0);
}

}  // namespace

TEST_CASE("golden generate through the serving engine: every scenario") {
  check_engine_generation<dsv32::TinyBf16>("tiny_bf16");
  check_engine_generation<dsv32::TinyBf16RopeInterleaved>("tiny_bf16_rope_interleaved");
  check_engine_generation<dsv32::TinyFp8Ue8m0Yarn>("tiny_fp8_ue8m0_yarn");
  check_engine_generation<dsv32::TinyFp8PlainScale>("tiny_fp8_plain_scale");
  check_engine_generation<dsv32::TinyBf16, dsv32::testing::HostInvisible>("tiny_bf16");
}

TEST_CASE("golden generate: tiny_bf16") { check_generation<dsv32::TinyBf16>("tiny_bf16"); }
TEST_CASE("golden generate: tiny_bf16_rope_interleaved") {
  check_generation<dsv32::TinyBf16RopeInterleaved>("tiny_bf16_rope_interleaved");
}
TEST_CASE("golden generate: tiny_fp8_ue8m0_yarn") { check_generation<dsv32::TinyFp8Ue8m0Yarn>("tiny_fp8_ue8m0_yarn"); }
TEST_CASE("golden generate: tiny_fp8_plain_scale") {
  check_generation<dsv32::TinyFp8PlainScale>("tiny_fp8_plain_scale");
}

// The same generations on a backend whose memory the host cannot read.
using dsv32::testing::HostInvisible;
TEST_CASE("golden generate on HostInvisible: tiny_bf16") { check_generation<dsv32::TinyBf16, HostInvisible>("tiny_bf16"); }
TEST_CASE("golden generate on HostInvisible: tiny_bf16_rope_interleaved") {
  check_generation<dsv32::TinyBf16RopeInterleaved, HostInvisible>("tiny_bf16_rope_interleaved");
}
TEST_CASE("golden generate on HostInvisible: tiny_fp8_ue8m0_yarn") {
  check_generation<dsv32::TinyFp8Ue8m0Yarn, HostInvisible>("tiny_fp8_ue8m0_yarn");
}
TEST_CASE("golden generate on HostInvisible: tiny_fp8_plain_scale") {
  check_generation<dsv32::TinyFp8PlainScale, HostInvisible>("tiny_fp8_plain_scale");
}
