// Tests of dsv32/config/registry.hpp: choosing a compiled config by name or by a config.json.
#include "dsv32/config/registry.hpp"

#include <doctest/doctest.h>

#include "support/test_support.hpp"

#include <string>
#include <string_view>

namespace {

using dsv32::ModelArgs;
using dsv32::Presets;

using dsv32::test::kGoldenDir;

// The name of the config a dispatch chose ("" if none was called).
struct Chosen {
  std::string name;
  int calls = 0;
  template <class C>
  void operator()() {
    name = std::string(C::name);
    ++calls;
  }
};

// A user's config with the shape of TinyBf16 under another name.
struct Mine : dsv32::TinyBf16 {
  static constexpr std::string_view name = "mine";
};

}  // namespace

TEST_CASE("registry: by_name finds each preset and nothing else") {
  for (std::string_view n : {"deepseek-v3.2-exp-671b", "tiny_bf16", "tiny_bf16_rope_interleaved", "tiny_fp8_ue8m0_yarn",
                             "tiny_fp8_plain_scale"}) {
    Chosen c;
    CHECK(Presets::by_name(n, c));
    CHECK(c.name == n);
    CHECK(c.calls == 1);
  }
  Chosen none;
  CHECK_FALSE(Presets::by_name("tiny", none));
  CHECK_FALSE(Presets::by_name("", none));
  CHECK(none.calls == 0);
  CHECK(Presets::names() ==
        "deepseek-v3.2-exp-671b, tiny_bf16, tiny_bf16_rope_interleaved, tiny_fp8_ue8m0_yarn, tiny_fp8_plain_scale");
}

TEST_CASE("registry: every golden config.json and the released config dispatch to their own preset") {
  const std::pair<const char*, const char*> scenarios[] = {
      {"tiny_bf16", "tiny_bf16"},
      {"tiny_bf16_rope_interleaved", "tiny_bf16_rope_interleaved"},  // differs only in indexer_rope_interleaved
      {"tiny_fp8_ue8m0_yarn", "tiny_fp8_ue8m0_yarn"},                // differs in scale_fmt and gate_bias
      {"tiny_fp8_plain_scale", "tiny_fp8_plain_scale"},
  };
  for (const auto& scenario : scenarios) {
    const auto& [dir, want] = scenario;
    CAPTURE(scenario.first);  // CAPTURE's lambda cannot capture a structured binding before clang 16
    Chosen c;
    dsv32::dispatch_config(ModelArgs::from_file(kGoldenDir + dir + "/config.json"), c);
    CHECK(c.name == want);
    CHECK(c.calls == 1);
  }
  Chosen c;
  dsv32::dispatch_config(ModelArgs::from_file(std::string(DSV32_TEST_DATA) + "/configs/config_671B_v3.2.json"), c);
  CHECK(c.name == "deepseek-v3.2-exp-671b");
}

TEST_CASE("registry: a config matching no compiled config is refused, naming the candidates") {
  ModelArgs a = ModelArgs::of<dsv32::TinyBf16>();
  a.dim = 128;
  Chosen c;
  try {
    dsv32::dispatch_config(a, c, "some/config.json");
    FAIL("expected an error");
  } catch (const dsv32::Error& e) {
    CHECK(e.kind() == dsv32::ErrorKind::invalid_config);
    const std::string w = e.what();
    CHECK(w.find("some/config.json matches none of the configs compiled into this program") != std::string::npos);
    CHECK(w.find(Presets::names()) != std::string::npos);
  }
  CHECK(c.calls == 0);

  // a custom list: the first matching config wins
  Chosen m;
  dsv32::dispatch_config<dsv32::ConfigList<Mine, dsv32::TinyBf16>>(ModelArgs::of<dsv32::TinyBf16>(), m);
  CHECK(m.name == "mine");
  CHECK(m.calls == 1);
}
