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

namespace {

constexpr std::string_view usage = R"(usage: dsv32-convert --hf-ckpt-path DIR --save-path DIR --model-parallel N [--n-experts E] [--quiet]

Splits the Hugging Face checkpoint in --hf-ckpt-path (config.json, model.safetensors.index.json and
its shards, or a single model.safetensors) into N model-parallel shards model{rank}-mpN.safetensors
in --save-path, laid out exactly as the reference's inference/convert.py writes them: embed, wq_b,
wkv_b, w1, w3 and head split along dimension 0, wo and w2 along dimension 1 (FP8 scales alike),
routed experts partitioned by rank, everything else replicated; multi-token-prediction layers left
out. Files whose names contain "token" are copied, and a config.json in the reference's ModelArgs
naming is written. Everything is checked before anything is written; each shard is written under a
temporary name and renamed when complete.

options:
  --hf-ckpt-path DIR    the Hugging Face checkpoint directory
  --save-path DIR       where to write the shards (created if needed; must not be the input)
  --model-parallel N    number of model-parallel ranks (>= 1)
  --n-experts E         number of routed experts; optional, checked against config.json
  --quiet               no progress output
  --help                print this help

Progress (tensors and bytes written per shard) goes to standard error. Exit status: 0 on success,
1 if the conversion fails (the reason on standard error), 2 for bad arguments.
)";

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

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "dsv32-convert: " << message << "\n(run dsv32-convert --help for usage)\n";
  std::exit(2);
}

std::int64_t parse_positive(std::string_view flag, const std::string& text) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || v < 1 || v > (1 << 20))
    usage_error(std::string(flag) + " needs a positive integer, got '" + text + "'");
  return v;
}

Arguments parse_arguments(int argc, char** argv) {
  Arguments args;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::optional<std::string> inline_value;  // --flag=value
    if (const auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      inline_value = std::string(arg.substr(eq + 1));
      arg = arg.substr(0, eq);
    }
    auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= argc) usage_error(std::string(arg) + " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::cout << usage;
      std::exit(0);
    } else if (arg == "--hf-ckpt-path") {
      args.hf_dir = value();
    } else if (arg == "--save-path") {
      args.save_dir = value();
    } else if (arg == "--model-parallel") {
      args.world = static_cast<int>(parse_positive(arg, value()));
    } else if (arg == "--n-experts") {
      args.n_experts = parse_positive(arg, value());
    } else if (arg == "--quiet") {
      args.quiet = true;
    } else {
      usage_error("unknown argument '" + std::string(arg) + "'");
    }
  }
  if (args.hf_dir.empty()) usage_error("--hf-ckpt-path is required");
  if (args.save_dir.empty()) usage_error("--save-path is required");
  if (args.world == 0) usage_error("--model-parallel is required");
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
