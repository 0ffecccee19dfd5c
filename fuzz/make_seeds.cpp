// Writes the seed corpus of every fuzz target from the project's real files (tests/data):
//   dsv32_fuzz_make_seeds OUT_DIR
// makes OUT_DIR/<target>/ for each target in fuzz/ (see fuzz/README.md for what each holds). Files
// too large to fuzz quickly (the golden models' weights, the 7.8 MB tokenizer.json) are cut down to
// their small tensors / first tokens, keeping their real names, dtypes, shapes and structure.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <dsv32/io/hf_checkpoint.hpp>
#include <dsv32/io/safetensors.hpp>

#include "io/hf_test_support.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kData = DSV32_FUZZ_DATA;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

// A JSON file, parsed and kept for the process (a range-for over a temporary's member would dangle).
const json& parsed(const fs::path& p) {
  static std::map<std::string, json> cache;
  auto it = cache.find(p.string());
  if (it == cache.end()) it = cache.emplace(p.string(), json::parse(read_file(p))).first;
  return it->second;
}

std::vector<fs::path> scenarios() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(kData / "golden"))
    if (e.is_directory()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

void safetensors_seeds(const fs::path& out) {
  for (const fs::path& s : scenarios()) {
    const std::string name = s.filename().string();
    fs::copy_file(s / "expected.safetensors", out / (name + "_expected.safetensors"), fs::copy_options::overwrite_existing);
    // The model's small tensors (norms, biases, scales, gates: every dtype the file holds), as one file.
    const auto model = dsv32::SafetensorsFile::open(s / "model0-mp1.safetensors");
    dsv32::SafetensorsWriter w;
    std::size_t kept = 0;
    for (const auto& t : model->tensors())
      if (t.bytes() <= 512 && kept < 24) {
        w.add(t.name, t.dtype, t.shape, t.data, t.bytes());
        ++kept;
      }
    w.add_metadata("format", "pt");
    w.write(out / (name + "_model_small_tensors.safetensors"));
  }
}

void config_seeds(const fs::path& out) {
  for (const auto& e : fs::directory_iterator(kData / "configs"))
    if (e.path().extension() == ".json") fs::copy_file(e.path(), out / e.path().filename(), fs::copy_options::overwrite_existing);
  for (const fs::path& s : scenarios()) {
    const std::string name = s.filename().string();
    fs::copy_file(s / "config.json", out / (name + "_config.json"), fs::copy_options::overwrite_existing);
    const dsv32::ModelArgs args = dsv32::ModelArgs::from_file(s / "config.json");
    if (!args.indexer_rope_interleaved) write_file(out / (name + "_hf_config.json"), dsv32::to_hf_config(args).dump(1));
  }
}

void hf_index_seeds(const fs::path& out) {
  dsv32_test::TempDir tmp("fuzz_seeds");
  // The same checkpoint fuzz_hf_index opens: tiny_bf16 in 3 shards, with one MTP tensor.
  dsv32_test::hf_checkpoint_from_golden(kData / "golden/tiny_bf16", tmp.path, 3,
                                        {dsv32_test::mtp_tensor(2, "eh_proj.weight", {4, 4})});
  fs::copy_file(tmp.path / dsv32::HfCheckpointSource::index_file_name(), out / "tiny_bf16_3_shards.index.json");
  // A compact variant (the index as Hugging Face writes it, without indentation).
  const json index = json::parse(read_file(tmp.path / dsv32::HfCheckpointSource::index_file_name()));
  write_file(out / "tiny_bf16_3_shards_compact.index.json", index.dump());
}

// The real tokenizer.json cut down to its first `n` vocabulary entries, the merges among them and the
// added tokens (renumbered after the vocabulary, as the reference assigns ids to added tokens that
// are not in it), followed by a NUL and the real tokenizer_config.json.
void tokenizer_file_seeds(const fs::path& out) {
  const fs::path dir = kData / "tokenizer/deepseek_v3";
  const json full = json::parse(read_file(dir / "tokenizer.json"));
  const std::string config = read_file(dir / "tokenizer_config.json");
  for (const std::int32_t n : {300, 2000}) {
    json t = full;
    json vocab = json::object();
    for (const auto& [text, id] : full["model"]["vocab"].items())
      if (id.get<std::int32_t>() < n) vocab[text] = id;
    json merges = json::array();
    for (const auto& m : full["model"]["merges"]) {
      const std::string s = m.get<std::string>();
      const auto space = s.find(' ');
      const std::string left = s.substr(0, space), right = s.substr(space + 1);
      if (vocab.contains(left) && vocab.contains(right) && vocab.contains(left + right)) merges.push_back(m);
    }
    json added = json::array();
    std::int32_t next = n;
    for (const auto& a : full["added_tokens"]) {
      const std::int32_t id = a["id"].get<std::int32_t>();
      if (id < n) {
        added.push_back(a);
      } else if (added.size() < 40 || a["content"].get<std::string>().find("place") == std::string::npos) {
        json b = a;
        b["id"] = next++;
        added.push_back(b);
      }
    }
    t["model"]["vocab"] = vocab;
    t["model"]["merges"] = merges;
    t["added_tokens"] = added;
    write_file(out / ("deepseek_v3_first_" + std::to_string(n) + ".tokenizer"), t.dump() + std::string(1, '\0') + config);
  }
}

std::vector<std::string> texts() {
  const fs::path dir = kData / "tokenizer/deepseek_v3";
  std::vector<std::string> out;
  for (const auto& c : parsed(dir / "encode_cases.json")["cases"]) out.push_back(c["text"]);
  for (const auto& c : parsed(dir / "reference_cases.json")["encode"]) out.push_back(c["text"]);
  for (const auto& c : parsed(dir / "chat_cases.json")["cases"]) out.push_back(c["text"]);
  return out;
}

std::vector<std::vector<std::int32_t>> id_lists() {
  const fs::path dir = kData / "tokenizer/deepseek_v3";
  std::vector<std::vector<std::int32_t>> out;
  for (const auto& c : parsed(dir / "encode_cases.json")["cases"]) out.push_back(c["ids"]);
  for (const auto& c : parsed(dir / "reference_cases.json")["decode"]) out.push_back(c["ids"]);
  for (const auto& c : parsed(dir / "chat_cases.json")["cases"]) out.push_back(c["ids"]);
  return out;
}

void encode_seeds(const fs::path& out) {
  int i = 0;
  for (const std::string& t : texts()) write_file(out / ("text_" + std::to_string(i++)), t);
}

void decode_seeds(const fs::path& out) {
  int i = 0;
  for (const auto& ids : id_lists()) {
    // fuzz_decode's format: a mode byte (bit 0: 4-byte ids, else 3-byte; bit 1: skip special
    // tokens), then the ids, little-endian.
    for (const unsigned mode : {0u, 1u, 2u, 3u}) {
      std::string bytes(1, static_cast<char>(mode));
      for (std::int32_t id : ids)
        for (int b = 0; b < ((mode & 1) ? 4 : 3); ++b) bytes += static_cast<char>((static_cast<std::uint32_t>(id) >> (8 * b)) & 0xff);
      write_file(out / ("ids_" + std::to_string(i) + "_mode" + std::to_string(mode)), bytes);
    }
    ++i;
  }
}

void chat_seeds(const fs::path& out) {
  int i = 0;
  for (const auto& c : parsed(kData / "tokenizer/deepseek_v3/chat_cases.json")["cases"]) {
    const json request = {{"messages", c["messages"]}, {"add_generation_prompt", c["add_generation_prompt"]}};
    write_file(out / ("chat_" + std::to_string(i++) + ".json"), request.dump());
  }
}

// DeepSeek-V3.2-Exp's replies for fuzz_chat_output: the texts of its chat cases cut after each
// <｜Assistant｜> (what the model writes), as text and as ids, from either start state.
// Input format: a mode byte (bit 0: reasoning first, bit 1: ids), a split byte, the reply.
std::string mode_prefix(unsigned mode, unsigned split) { return std::string{static_cast<char>(mode), static_cast<char>(split)}; }

std::string ids_as_bytes(const std::vector<std::int32_t>& ids) {
  std::string bytes;
  for (const std::int32_t id : ids)
    for (int b = 0; b < 3; ++b) bytes += static_cast<char>((static_cast<std::uint32_t>(id) >> (8 * b)) & 0xff);
  return bytes;
}

void chat_output_seeds(const fs::path& out) {
  const std::string assistant = "<｜Assistant｜>";
  const std::int32_t assistant_id = 128804;
  int i = 0;
  for (const auto& c : parsed(kData / "tokenizer/deepseek_v3_2_exp/chat_cases.json")["cases"]) {
    const std::string text = c["text"];
    const std::vector<std::int32_t> ids = c["ids"];
    const std::size_t at = text.find(assistant);
    if (at == std::string::npos) continue;
    const std::string reply = text.substr(at + assistant.size());
    const auto id_at = std::find(ids.begin(), ids.end(), assistant_id);
    const std::vector<std::int32_t> reply_ids(id_at == ids.end() ? ids.end() : id_at + 1, ids.end());
    write_file(out / ("reply_" + std::to_string(i) + "_text"), mode_prefix(0, 128) + reply);
    write_file(out / ("reply_" + std::to_string(i) + "_text_reasoning"), mode_prefix(1, 77) + reply);
    write_file(out / ("reply_" + std::to_string(i) + "_ids"), mode_prefix(2, 0) + ids_as_bytes(reply_ids));
    ++i;
  }
  write_file(out / "thinking_text", mode_prefix(1, 200) + "Let me reason.</think>The answer is 42.<｜end▁of▁sentence｜>");
}

// DeepSeek-V3.2's completions for fuzz_dsml_output: every text of parse_cases.json in its mode, as
// text and as ids (same format as chat_output's seeds).
void dsml_output_seeds(const fs::path& out) {
  int i = 0;
  for (const auto& c : parsed(kData / "tokenizer/deepseek_v3_2/parse_cases.json")["cases"]) {
    const std::string text = c["text"];
    const unsigned thinking = c["thinking_mode"] == "thinking" ? 1u : 0u;
    write_file(out / ("completion_" + std::to_string(i) + "_text"), mode_prefix(thinking, 50 + 5 * i) + text);
    ++i;
  }
  // The assistant turns the encoder wrote in encode_cases.json (after the last <｜Assistant｜>), which
  // the model's own replies look like; and their ids.
  const std::string assistant = "<｜Assistant｜>";
  int k = 0;
  for (const auto& c : parsed(kData / "tokenizer/deepseek_v3_2/encode_cases.json")["cases"]) {
    if (c["text"].is_null()) continue;
    const std::string text = c["text"];
    const std::size_t at = text.rfind(assistant);
    if (at == std::string::npos || text.size() - at < assistant.size() + 12) continue;
    std::string reply = text.substr(at + assistant.size());
    unsigned thinking = 0;
    if (reply.starts_with("<think>")) {  // the prompt ended in thinking mode
      thinking = 1;
      reply.erase(0, 7);
    } else if (reply.starts_with("</think>")) {
      reply.erase(0, 8);
    }
    write_file(out / ("turn_" + std::to_string(k++) + "_text"), mode_prefix(thinking, 128) + reply);
  }
  int j = 0;
  for (const auto& c : parsed(kData / "tokenizer/deepseek_v3_2/encode_cases.json")["cases"]) {
    if (c["ids"].is_null() || j >= 8) continue;
    const std::vector<std::int32_t> ids = c["ids"];
    write_file(out / ("prompt_" + std::to_string(j++) + "_ids"), mode_prefix(2, 0) + ids_as_bytes(ids));
  }
}

// DeepSeek-V3.2's requests for fuzz_chat_v3_2: every conversation of encode_cases.json (refused ones
// included) as dsv32-tokenize reads it, key order kept.
void chat_v3_2_seeds(const fs::path& out) {
  const nlohmann::ordered_json cases =
      nlohmann::ordered_json::parse(read_file(kData / "tokenizer/deepseek_v3_2/encode_cases.json"));
  int i = 0;
  for (const auto& c : cases["cases"]) {
    const nlohmann::ordered_json request = {
        {"messages", c["messages"]}, {"thinking_mode", c["thinking_mode"]}, {"drop_thinking", c["drop_thinking"]}};
    write_file(out / ("request_" + std::to_string(i++) + ".json"), request.dump());
  }
}

void token_id_seeds(const fs::path& out) {
  int i = 0;
  for (const auto& ids : id_lists()) {
    std::string spaced, commas;
    for (std::size_t k = 0; k < ids.size(); ++k) {
      spaced += (k ? " " : "") + std::to_string(ids[k]);
      commas += (k ? ", " : "") + std::to_string(ids[k]);
    }
    write_file(out / ("ids_" + std::to_string(i) + "_spaces"), spaced);
    write_file(out / ("ids_" + std::to_string(i) + "_commas"), commas + "\n");
    ++i;
    if (i >= 40) break;
  }
  write_file(out / "golden_prompt", "97 260 130");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: dsv32_fuzz_make_seeds OUT_DIR\n";
    return 2;
  }
  try {
    const fs::path out = argv[1];
    const std::vector<std::pair<std::string, void (*)(const fs::path&)>> targets = {
        {"safetensors", safetensors_seeds}, {"config", config_seeds},     {"hf_index", hf_index_seeds},
        {"tokenizer_files", tokenizer_file_seeds}, {"encode", encode_seeds}, {"decode", decode_seeds},
        {"chat", chat_seeds},                {"token_ids", token_id_seeds},   {"chat_output", chat_output_seeds},
        {"dsml_output", dsml_output_seeds},  {"chat_v3_2", chat_v3_2_seeds}};
    for (const auto& [name, make] : targets) {
      fs::remove_all(out / name);
      fs::create_directories(out / name);
      make(out / name);
      const auto n = std::distance(fs::directory_iterator(out / name), {});
      std::printf("%-16s %3ld seed files\n", name.c_str(), static_cast<long>(n));
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "dsv32_fuzz_make_seeds: " << e.what() << "\n";
    return 1;
  }
}
