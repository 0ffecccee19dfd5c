// Fuzz target: a model's config.json in either naming — the reference's ModelArgs fields or Hugging
// Face's — read from a checkpoint directory with read_model_config(), as dsv32-generate,
// dsv32-inspect and load_checkpoint() do. What it accepts must validate, survive a round trip
// through to_json() / to_hf_config(), and have parameter counts and mismatches that compute
// without overflow (UBSan watches the arithmetic).
#include <cstddef>
#include <cstdint>

#include <dsv32/config/presets.hpp>
#include <dsv32/config/registry.hpp>
#include <dsv32/io/checkpoint.hpp>
#include <dsv32/io/hf_checkpoint.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dsv32;
  fuzz::scratch().write("config.json", fuzz::as_text(data, size));
  ModelArgs args;
  if (!fuzz::accepts([&] { args = read_model_config(fuzz::scratch().path()); })) return 0;

  // The reference naming's reader accepts what validate() has not checked yet (absent fields keep
  // defaults; a model checks its shapes when built); the Hugging Face reader validates.
  if (!fuzz::accepts([&] { args.validate("fuzzed config.json"); })) return 0;
  const ParamCounts counts = count_params(args);
  FUZZ_CHECK(counts.total >= counts.activated && counts.activated > 0);

  // Round trips: the reference format, and Hugging Face's where it can express the config.
  const ModelArgs again = ModelArgs::from_json(args.to_json(), "round trip");
  FUZZ_CHECK(again.to_json() == args.to_json());
  if (!args.indexer_rope_interleaved) {
    fuzz::accepts([&] {  // Hugging Face cannot say every combination (e.g. gate_bias without noaux_tc)
      const HfConfig hf = parse_hf_config(to_hf_config(args), "hf round trip");
      FUZZ_CHECK(hf.args.dim == args.dim && hf.args.n_layers == args.n_layers && hf.args.vocab_size == args.vocab_size);
    });
  }
  fuzz::accepts([&] { args.check_matches<TinyBf16>(); });
  bool dispatched = false;
  fuzz::accepts([&] { dispatch_config<Presets>(args, [&]<class C>() { dispatched = true; }); });
  (void)dispatched;
  return 0;
}
