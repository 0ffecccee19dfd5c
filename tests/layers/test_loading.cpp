// Tests of loading a Transformer's weights (Transformer::load_weights, dsv32::load_weights and
// load_checkpoint): checkpoints crafted from the reference's tiny_bf16 checkpoint with a missing,
// extra, mistyped or misshapen tensor, or a disagreeing config.json, are refused with every problem
// named and the model left unloaded (never half-loaded); borrowed and copied weights give identical
// logits, and borrowed weights keep their file alive.
#include "dsv32/backend/cpu/kernels.hpp"
#include "dsv32/config/presets.hpp"
#include "dsv32/io/checkpoint.hpp"
#include "dsv32/io/safetensors.hpp"
#include "dsv32/layers/transformer.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include "support/test_support.hpp"

using dsv32::test::error_of;
using dsv32::test::contains;
using dsv32::test::TempDir;

namespace {

namespace fs = std::filesystem;
using dsv32::Cpu;
using dsv32::DType;
using dsv32::ErrorKind;
using dsv32::TinyBf16;
using Model = dsv32::Transformer<TinyBf16>;
using Param = dsv32::Parameter<Cpu>;

const fs::path kScenario = fs::path(dsv32::test::kGoldenDir) / "tiny_bf16";
const fs::path kCheckpoint = kScenario / "model0-mp1.safetensors";


// A tensor written in place of (or in addition to) the checkpoint's.
struct Replacement {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;
};

// Writes the golden checkpoint to `out` without the tensors in `drop` and with `put` added (replacing
// tensors of the same name).
void write_variant(const fs::path& out, const std::set<std::string>& drop = {}, const std::vector<Replacement>& put = {}) {
  const auto src = dsv32::SafetensorsFile::open(kCheckpoint);
  dsv32::SafetensorsWriter w;
  std::set<std::string> replaced;
  for (const auto& r : put) replaced.insert(r.name);
  for (const auto& t : src->tensors())
    if (!drop.count(t.name) && !replaced.count(t.name)) w.add(t.name, t.dtype, t.shape, t.data, t.bytes());
  for (const auto& r : put) w.add(r.name, r.dtype, r.shape, r.bytes.data(), r.bytes.size());
  w.write(out);
}

// The golden tensor `name` widened to F32 bytes.
std::vector<std::byte> as_f32_bytes(const std::string& name) {
  const auto src = dsv32::SafetensorsFile::open(kCheckpoint);
  const auto& t = src->at(name);
  std::vector<float> f(static_cast<std::size_t>(t.numel()));
  t.read_as_f32(f.data());
  std::vector<std::byte> b(f.size() * 4);
  std::memcpy(b.data(), f.data(), b.size());
  return b;
}
std::vector<std::byte> raw_bytes(const std::string& name) {
  const auto src = dsv32::SafetensorsFile::open(kCheckpoint);
  const auto r = src->at(name).raw();
  return {r.begin(), r.end()};
}

dsv32::RuntimeOptions options() {
  dsv32::RuntimeOptions o;
  o.max_batch_size = 2;
  o.max_seq_len = 16;
  return o;
}


// Nothing is loaded: every parameter unbound, the model not ready, forward refused with kind state.
void check_unloaded(Model& m) {
  int loaded = 0;
  m.visit([&](const std::string&, Param& p) { loaded += p.loaded(); });
  CHECK(loaded == 0);
  CHECK_FALSE(m.ready());
  const std::vector<std::int32_t> t{1, 2, 3};
  CHECK(contains(error_of([&] { m.forward(t, 1, 0); }, ErrorKind::state), "not loaded"));
}

const std::vector<std::int32_t> kPrompt{97, 260, 130, 247, 92, 63, 189, 102, 132, 27, 226, 230, 197, 253};

}  // namespace

TEST_CASE("load_checkpoint: the golden checkpoint loads, borrowing what it can; copies give identical logits") {
  Model borrowed(options()), copied(options());
  dsv32::load_checkpoint(borrowed, kScenario);  // a directory: model0-mp1.safetensors with its config.json
  dsv32::load_checkpoint(copied, kCheckpoint, dsv32::LoadOptions{.borrow = false});
  REQUIRE(borrowed.ready());
  REQUIRE(copied.ready());

  // the default load borrows every tensor whose dtype is the parameter's and that sits aligned in the
  // mapping; BF16 norms and head go into F32 parameters and are converted
  const auto file = dsv32::SafetensorsFile::open(kCheckpoint);
  int n_borrowed = 0, n_params = 0;
  borrowed.visit([&](const std::string& name, Param& p) {
    CAPTURE(name);
    ++n_params;
    const auto& t = file->at(name);
    const bool aligned = reinterpret_cast<std::uintptr_t>(t.data) % dsv32::dtype_size(t.dtype) == 0;
    CHECK(p.borrowed() == (t.dtype == p.dtype() && aligned));
    n_borrowed += p.borrowed();
  });
  // all but the F32 parameters stored as BF16: 6 norm tensors per layer (q, kv, k_norm weight and bias,
  // attn, ffn), the final norm and the head (and possibly an F32 gate bias that sits misaligned)
  CHECK(n_params == 106);
  CHECK(n_borrowed >= n_params - 20 - 2);
  int copied_borrowed = 0;
  copied.visit([&](const std::string&, Param& p) {
    CHECK(p.loaded());
    copied_borrowed += p.borrowed();
  });
  CHECK(copied_borrowed == 0);
  // borrowed bytes are the file's, converted ones its values widened exactly
  borrowed.visit([&](const std::string& name, Param& p) {
    const auto& t = file->at(name);
    if (p.dtype() == t.dtype) {
      CHECK(std::memcmp(p.data(), t.data, t.bytes()) == 0);
    } else if (p.dtype() == DType::F32) {
      std::vector<float> want(static_cast<std::size_t>(t.numel()));
      t.read_as_f32(want.data());
      CHECK(std::memcmp(p.data(), want.data(), want.size() * 4) == 0);
    }
  });

  const auto a = borrowed.forward(kPrompt, 2, 0), b = copied.forward(kPrompt, 2, 0);
  CHECK(a.values == b.values);
  const std::vector<std::int32_t> step{4, 5};
  CHECK(borrowed.forward(step, 2, 7).values == copied.forward(step, 2, 7).values);
}

TEST_CASE("load_checkpoint: borrowed weights keep their file mapped after the file is deleted") {
  Model reference(options());
  dsv32::load_checkpoint(reference, kCheckpoint);
  const auto want = reference.forward(kPrompt, 2, 0);
  Model model(options());
  {
    TempDir dir;
    write_variant(dir.path / "copy.safetensors");
    dsv32::load_checkpoint(model, dir.path / "copy.safetensors");
  }  // the directory and the file are gone; the mapping lives on in the parameters
  REQUIRE(model.ready());
  CHECK(model.forward(kPrompt, 2, 0).values == want.values);
}

TEST_CASE("load_checkpoint: a missing, extra, mistyped or misshapen tensor is named with the file; nothing is loaded") {
  TempDir dir;
  struct Case {
    const char* what;
    std::set<std::string> drop;
    std::vector<Replacement> put;
    std::vector<std::string> messages;
  };
  const std::vector<Case> cases = {
      {"missing", {"layers.1.ffn.experts.3.w2.weight"}, {}, {"missing tensor 'layers.1.ffn.experts.3.w2.weight' (expected BF16 [96, 48])"}},
      {"extra",
       {},
       {{"layers.1.ffn.experts.8.w1.weight", DType::BF16, {48, 96}, raw_bytes("layers.1.ffn.experts.7.w1.weight")}},
       {"unexpected tensor 'layers.1.ffn.experts.8.w1.weight' (the model has no such parameter)"}},
      {"wrong dtype",
       {},
       {{"layers.0.attn.wq_a.weight", DType::F32, {64, 96}, as_f32_bytes("layers.0.attn.wq_a.weight")}},
       {"tensor 'layers.0.attn.wq_a.weight' has dtype F32, expected BF16"}},
      {"wrong dtype for an f32 parameter",
       {},
       {{"norm.weight", DType::F16, {96}, raw_bytes("norm.weight")}},
       {"tensor 'norm.weight' has dtype F16, expected F32 or BF16"}},
      {"wrong shape",
       {},
       {{"layers.2.attn.wkv_b.weight", DType::BF16, {32, 120}, raw_bytes("layers.2.attn.wkv_b.weight")}},
       {"tensor 'layers.2.attn.wkv_b.weight' has shape [32, 120], expected [120, 32]"}},
      {"several at once",
       {"embed.weight", "layers.0.attn_norm.weight"},
       {{"layers.1.ffn.gate.bias", DType::F32, {4, 2}, raw_bytes("layers.1.ffn.gate.bias")},
        {"mtp.0.weight", DType::BF16, {96}, raw_bytes("norm.weight")}},
       {"4 problem(s) with the model's tensors", "missing tensor 'embed.weight'", "missing tensor 'layers.0.attn_norm.weight'",
        "tensor 'layers.1.ffn.gate.bias' has shape [4, 2], expected [8]", "unexpected tensor 'mtp.0.weight'"}},
  };
  int i = 0;
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const fs::path file = dir.path / ("variant" + std::to_string(i++) + ".safetensors");
    write_variant(file, c.drop, c.put);
    Model model(options());
    const std::string w = error_of([&] { dsv32::load_checkpoint(model, file); }, ErrorKind::invalid_file);
    CHECK(contains(w, file.string()));
    for (const auto& m : c.messages) {
      CAPTURE(m);
      CHECK(contains(w, m));
    }
    check_unloaded(model);
    // the same through a directory holding the shard, and through load_weights with a source
    Model again(options());
    error_of([&] { dsv32::load_weights(again, dsv32::SafetensorsSource(file)); }, ErrorKind::invalid_file);
    check_unloaded(again);
  }
}

TEST_CASE("load_checkpoint: a failed load leaves a loaded model as it was") {
  TempDir dir;
  write_variant(dir.path / "broken.safetensors", {"head.weight"});
  Model model(options());
  dsv32::load_checkpoint(model, kCheckpoint);
  const auto before = model.forward(kPrompt, 2, 0);
  error_of([&] { dsv32::load_checkpoint(model, dir.path / "broken.safetensors"); }, ErrorKind::invalid_file);
  REQUIRE(model.ready());
  model.reset();
  CHECK(model.forward(kPrompt, 2, 0).values == before.values);
}

TEST_CASE("load_checkpoint: a directory's config.json must agree with the compiled config") {
  TempDir dir;
  write_variant(dir.path / "model0-mp1.safetensors");
  nlohmann::json j;
  {
    std::ifstream in(kScenario / "config.json");
    j = nlohmann::json::parse(in);
  }
  // matching (runtime options may differ): loads
  j["max_seq_len"] = 4096;
  std::ofstream(dir.path / "config.json") << j.dump();
  {
    Model model(options());
    dsv32::load_checkpoint(model, dir.path);
    CHECK(model.ready());
  }
  // disagreeing: every field listed with the file, nothing loaded
  j["dim"] = 128;
  j["n_heads"] = 4;
  j["score_func"] = "softmax";
  std::ofstream(dir.path / "config.json") << j.dump();
  Model model(options());
  const std::string w = error_of([&] { dsv32::load_checkpoint(model, dir.path); }, ErrorKind::invalid_config);
  CHECK(contains(w, (dir.path / "config.json").string()));
  CHECK(contains(w, "3 field(s)"));
  CHECK(contains(w, "dim: config.json has 128, the compiled config (tiny_bf16) has 96"));
  CHECK(contains(w, "n_heads: config.json has 4, the compiled config (tiny_bf16) has 3"));
  CHECK(contains(w, "score_func: config.json has \"softmax\", the compiled config (tiny_bf16) has \"sigmoid\""));
  check_unloaded(model);
  // a config.json that is not valid: named too
  std::ofstream(dir.path / "config.json") << "{\"dim\": 96, \"n_layerz\": 3}";
  Model model2(options());
  CHECK(contains(error_of([&] { dsv32::load_checkpoint(model2, dir.path); }, ErrorKind::invalid_config), "n_layerz"));
  check_unloaded(model2);
}

TEST_CASE("load_checkpoint: a directory without this rank's shard, or no file at all, is an io error") {
  TempDir dir;
  write_variant(dir.path / "model0-mp2.safetensors");  // a shard for another world size
  Model model(options());
  const std::string w = error_of([&] { dsv32::load_checkpoint(model, dir.path); }, ErrorKind::io);
  CHECK(contains(w, dir.path.string()));
  CHECK(contains(w, "model0-mp1.safetensors"));
  check_unloaded(model);
  error_of([&] { dsv32::load_checkpoint(model, dir.path / "nothing.safetensors"); }, ErrorKind::io);
  check_unloaded(model);
}

TEST_CASE("Transformer::load_weights: a loader that throws or skips a parameter leaves nothing loaded") {
  Model model(options());
  model.init_random(1);
  REQUIRE(model.ready());
  int calls = 0;
  CHECK_THROWS_AS(model.load_weights([&](const std::string&, Param& p) {
    if (++calls == 50) throw std::runtime_error("disk on fire");
    p.allocate();
  }),
                  std::runtime_error);
  CHECK(calls == 50);
  check_unloaded(model);  // the previous weights are released too: never a mix of two loads

  const std::string w = error_of(
      [&] {
        model.load_weights([&](const std::string& name, Param& p) {
          if (name != "layers.1.attn.kv_norm.weight") p.allocate();
        });
      },
      ErrorKind::state);
  CHECK(contains(w, "parameter layers.1.attn.kv_norm.weight was not loaded"));
  check_unloaded(model);

  model.load_weights([](const std::string&, Param& p) { p.allocate(); });  // all zeros, complete
  CHECK(model.ready());
  const auto logits = model.forward(std::vector<std::int32_t>{1, 2}, 1, 0);
  for (float v : logits.values) CHECK(v == 0.0f);  // zero head
}
