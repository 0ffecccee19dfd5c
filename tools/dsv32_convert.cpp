// dsv32-convert: split a Hugging Face DeepSeek-V3.2 checkpoint into the reference's model-parallel
// shards (model{rank}-mp{world}.safetensors), like the reference's convert.py — see --help.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "dsv32/io/convert.hpp"

#include "cli.hpp"

namespace {

constexpr std::string_view kUsage =
    "usage: dsv32-convert --hf-ckpt-path DIR --save-path DIR --model-parallel N [--n-experts E] [--quiet]";

constexpr std::string_view kDescription = R"(Splits the Hugging Face checkpoint in --hf-ckpt-path (config.json, model.safetensors.index.json and
its shards, or a single model.safetensors) into N model-parallel shards model{rank}-mpN.safetensors
in --save-path, laid out exactly as the reference's inference/convert.py writes them: embed, wq_b,
wkv_b, w1, w3 and head split along dimension 0, wo and w2 along dimension 1 (FP8 scales alike),
routed experts partitioned by rank, everything else replicated; multi-token-prediction layers left
out. Files whose names contain "token" are copied, and a config.json in the reference's ModelArgs
naming is written. Everything is checked before anything is written; each shard is written under a
temporary name and renamed when complete.)";

constexpr std::string_view kFooter = R"(Progress (tensors and bytes written per shard) goes to standard error. Exit status: 0 on success,
1 if the conversion fails (the reason on standard error), 2 for bad arguments.)";

struct Arguments {
  std::string hf_dir, save_dir;
  int world = 0;
  std::optional<std::int64_t> n_experts;
  bool quiet = false;
};

// "1.23 GiB"
std::string format_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return buf;
}

Arguments parse_arguments(int argc, char** argv) {
  Arguments args;
  CLI::App app(std::string(kDescription), "dsv32-convert");
  dsv32::tools::setup(app, std::string(kUsage), 24);
  app.footer(std::string(kFooter));
  const auto positive = dsv32::tools::integer(1, 1 << 20);
  app.add_option("--hf-ckpt-path", args.hf_dir, "the Hugging Face checkpoint directory")->option_text("DIR")->required();
  app.add_option("--save-path", args.save_dir, "where to write the shards (created if needed; must not be the input)")
      ->option_text("DIR")
      ->required();
  app.add_option("--model-parallel", args.world, "number of model-parallel ranks (>= 1)")
      ->option_text("N")
      ->check(positive)
      ->required();
  dsv32::tools::add_optional(app, "--n-experts", args.n_experts, "E",
                             "number of routed experts; optional, checked against config.json")
      ->check(positive);
  app.add_flag("--quiet", args.quiet, "no progress output");
  dsv32::tools::add_help(app);
  dsv32::tools::parse(app, argc, argv);
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  const Arguments args = parse_arguments(argc, argv);
  using Clock = std::chrono::steady_clock;
  auto last = Clock::now();
  const auto progress = [&](const dsv32::ConvertProgress& p) {
    if (args.quiet) return;
    const auto now = Clock::now();
    const bool done = p.tensors_done == p.tensors_total;
    if (!done && now - last < std::chrono::milliseconds(500)) return;  // a line every half second at most
    last = now;
    std::cerr << p.file.filename().string() << ": " << p.tensors_done << "/" << p.tensors_total << " tensors, "
              << format_bytes(p.bytes_done) << " / " << format_bytes(p.bytes_total) << (done ? " done" : "") << "\n";
  };
  try {
    dsv32::ConvertOptions options;
    options.n_experts = args.n_experts;
    const auto result = dsv32::convert_hf_checkpoint(args.hf_dir, args.save_dir, args.world, progress, options);
    if (!args.quiet) {
      std::cerr << "wrote " << result.shards.size() << " shard(s) to " << args.save_dir;
      if (result.skipped) std::cerr << " (" << result.skipped << " multi-token-prediction tensors left out)";
      std::cerr << ", copied " << result.copied.size() << " tokenizer file(s)\n";
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "dsv32-convert: " << e.what() << "\n";
    return 1;
  }
}
