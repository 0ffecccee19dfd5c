// make_test_checkpoint: writes a damaged copy of a checkpoint directory for the dsv32-inspect tests.
//
//   make_test_checkpoint SRC_DIR DST_DIR [--hf] [--drop NAME]... [--extra NAME]... [--flatten NAME]...
//
// Copies SRC_DIR/config.json and SRC_DIR/model0-mp1.safetensors into DST_DIR, leaving out the
// --drop tensors, adding an F32 [1] tensor for each --extra name, and storing each --flatten tensor
// with its shape flattened to one dimension (same bytes, wrong shape). With --hf, writes a Hugging
// Face checkpoint instead: config.json in Hugging Face naming and model.safetensors under Hugging
// Face tensor names.
#include <dsv32/config/model_args.hpp>
#include <dsv32/io/safetensors.hpp>
#include <dsv32/io/hf_checkpoint.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 3) {
    std::fprintf(stderr, "usage: make_test_checkpoint SRC_DIR DST_DIR [--hf] [--drop NAME]... [--extra NAME]... "
                         "[--flatten NAME]...\n");
    return 2;
  }
  const fs::path src = argv[1], dst = argv[2];
  std::set<std::string> drop, flatten;
  std::vector<std::string> extra;
  bool hf = false;
  for (int i = 3; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--hf") {
      hf = true;
      continue;
    }
    if (i + 1 >= argc || (flag != "--drop" && flag != "--extra" && flag != "--flatten")) {
      std::fprintf(stderr, "make_test_checkpoint: bad argument %s\n", argv[i]);
      return 2;
    }
    const std::string name = argv[++i];
    if (flag == "--drop") drop.insert(name);
    else if (flag == "--extra") extra.push_back(name);
    else flatten.insert(name);
  }
  try {
    fs::remove_all(dst);
    fs::create_directories(dst);
    if (hf) {
      std::ofstream(dst / "config.json") << dsv32::to_hf_config(dsv32::ModelArgs::from_file(src / "config.json")).dump(2);
    }
    if (!hf) fs::copy_file(src / "config.json", dst / "config.json");
    auto stored_name = [&](const std::string& name) {
      if (hf) return dsv32::hf_name_from_dsv32(name);
      return name;
    };
    const auto file = dsv32::SafetensorsFile::open(src / "model0-mp1.safetensors");
    dsv32::SafetensorsWriter writer;
    for (const dsv32::TensorInfo& t : file->tensors()) {
      if (drop.count(t.name)) continue;
      std::vector<std::int64_t> shape = t.shape;
      if (flatten.count(t.name)) shape = {t.numel()};
      writer.add(stored_name(t.name), t.dtype, shape, t.data, t.bytes());
    }
    static const float one = 1.0f;
    for (const std::string& name : extra) writer.add(stored_name(name), dsv32::DType::F32, {1}, &one, sizeof one);
    writer.write(dst / (hf ? "model.safetensors" : "model0-mp1.safetensors"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_test_checkpoint: %s\n", e.what());
    return 1;
  }
  return 0;
}
