// Fuzz target: model.safetensors.index.json of a Hugging Face checkpoint. A real sharded checkpoint
// (the tiny_bf16 golden scenario in 3 shards, with one multi-token-prediction tensor) is written
// once to a scratch directory; each input replaces its index and HfCheckpointSource opens the
// directory: JSON, weight_map entries, shard file names (no path may leave the directory), tensors
// held by the shard the index names and by no other. What it accepts must serve every tensor.
#include <cstddef>
#include <cstdint>

#include <dsv32/io/hf_checkpoint.hpp>

#include "fuzz_support.hpp"
#include "io/hf_test_support.hpp"

namespace {

const std::filesystem::path& checkpoint_dir() {
  static const std::filesystem::path dir = [] {
    const auto d = dsv32::fuzz::scratch().path() / "checkpoint";
    dsv32_test::hf_checkpoint_from_golden(std::filesystem::path(DSV32_FUZZ_DATA) / "golden/tiny_bf16", d, 3,
                                          {dsv32_test::mtp_tensor(2, "eh_proj.weight", {4, 4})});
    return d;
  }();
  return dir;
}

}  // namespace

// Loading happens once, before fuzzing starts, so that libFuzzer's per-input timeout does not count it.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)checkpoint_dir();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dsv32;
  const auto& dir = checkpoint_dir();
  {
    std::ofstream out(dir / HfCheckpointSource::index_file_name(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  std::unique_ptr<HfCheckpointSource> source;
  if (!fuzz::accepts([&] { source = std::make_unique<HfCheckpointSource>(dir); })) return 0;
  const auto names = source->names();
  FUZZ_CHECK(!names.empty());
  for (const std::string& name : names) {
    const TensorInfo* t = source->find(name);
    FUZZ_CHECK(t != nullptr);
    FUZZ_CHECK(source->owner_of(*t) != nullptr);
    FUZZ_CHECK(source->shard_of(name) != nullptr);
    FUZZ_CHECK(!source->origin(name).empty());
    FUZZ_CHECK(source->hf_name(name) == t->name);
  }
  return 0;
}
