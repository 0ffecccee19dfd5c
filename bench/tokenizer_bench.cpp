// dsv32-bench-tokenizer: encode and decode throughput of dsv32::Tokenizer on a few MB of mixed
// text (English, code, CJK, digits, emoji, whitespace runs), generated deterministically from the
// tokenizer's case files and a fixed-seed generator. Prints median MB/s and tokens/s.
//
// usage: dsv32-bench-tokenizer [--tokenizer DIR] [--cases DIR] [--mb MEGABYTES] [--runs N] [--cache ENTRIES]
//
// The corpus is built from the case files (encode_cases.json, reference_cases.json) of --cases,
// by default DeepSeek-V3's folder, so that tokenizers are compared on the same text.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "dsv32/tokenizer.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Settings {
  std::string tokenizer_dir;
  std::string cases_dir;
  double megabytes = 4.0;
  int runs = 5;
  std::size_t cache = dsv32::TokenizerOptions{}.cache_capacity;
};

const std::vector<std::string>& fixed_fragments() {
  static const std::vector<std::string> fragments = {
      "The quick brown fox jumps over the lazy dog. ",
      "In 2024, the model processed 1,234,567 requests at 99.95% availability.\n",
      "def attention(q, k, v, mask=None):\n    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))\n"
      "    if mask is not None:\n        scores = scores.masked_fill(mask == 0, float('-inf'))\n"
      "    return torch.softmax(scores, dim=-1) @ v\n",
      "for (std::size_t i = 0; i < n; ++i) { out[i] = std::max(a[i], b[i]) * 0.5f; }\n",
      "深度求索发布了新的混合专家模型，支持十二万八千个词元的上下文窗口。",
      "東京は日本の首都です。ひらがなとカタカナ、そして漢字を使います。",
      "한국어 문장도 섞여 있습니다. ",
      "Приветствуем всех участников конференции! ",
      "emoji: 😀🎉👍🏽 👨‍👩‍👧 ✨🚀 ",
      "\t\t    \n\n\n        \r\n",
      "<div class=\"container\"><p>Hello &amp; welcome</p></div>\n",
      "{\"id\": 42, \"values\": [3.14159, 2.71828, 1.41421], \"ok\": true}\n",
  };
  return fragments;
}

/// Pseudo-words from syllables: many distinct pieces, so the word cache also misses.
std::string pseudo_word(std::mt19937& rng) {
  static constexpr std::string_view syllables[] = {"ka", "lo", "mi", "tren", "sta", "qu", "ex", "ing",
                                                   "ion", "pre", "zo", "ber", "ul", "th", "vy", "ard"};
  std::uniform_int_distribution<int> count(1, 4);
  std::uniform_int_distribution<int> pick(0, 15);
  std::string w;
  for (int n = count(rng); n > 0; --n) w += syllables[pick(rng)];
  return w;
}

/// Documents of 1-8 KB, `megabytes` in total.
std::vector<std::string> make_corpus(const Settings& s, const std::vector<std::string>& case_texts) {
  std::mt19937 rng(20250917);  // the sequence of std::mt19937 is fixed by the standard
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<int> doc_size(1024, 8192);
  std::uniform_int_distribution<std::uint32_t> number(0, 99999999);
  const auto total = static_cast<std::size_t>(s.megabytes * 1e6);
  std::vector<std::string> docs;
  std::size_t size = 0;
  while (size < total) {
    std::string doc;
    const auto target = static_cast<std::size_t>(doc_size(rng));
    while (doc.size() < target) {
      switch (kind(rng)) {
        case 0: case 1: case 2: doc += case_texts[rng() % case_texts.size()]; break;
        case 3: case 4: doc += fixed_fragments()[rng() % fixed_fragments().size()]; break;
        case 5: doc += std::to_string(number(rng)) + (rng() % 2 ? " " : ".\n"); break;
        case 6: doc += std::string(1 + rng() % 12, rng() % 3 ? ' ' : '\n'); break;
        default:
          for (int w = 0; w < 8; ++w) doc += pseudo_word(rng) + ' ';
          doc += '\n';
      }
    }
    size += doc.size();
    docs.push_back(std::move(doc));
  }
  return docs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

Settings parse(int argc, char** argv) {
  Settings s;
#ifdef DSV32_TOKENIZER_DEFAULT_DIR
  s.tokenizer_dir = DSV32_TOKENIZER_DEFAULT_DIR;
  s.cases_dir = DSV32_TOKENIZER_DEFAULT_DIR;
#endif
  if (const char* env = std::getenv("DSV32_TOKENIZER_DIR")) s.tokenizer_dir = env;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || i + 1 >= argc) {
      std::cerr << "usage: dsv32-bench-tokenizer [--tokenizer DIR] [--cases DIR] [--mb MEGABYTES] [--runs N] "
                   "[--cache ENTRIES]\n";
      std::exit(arg == "--help" ? 0 : 2);
    }
    const std::string value = argv[++i];
    if (arg == "--tokenizer") {
      s.tokenizer_dir = value;
    } else if (arg == "--cases") {
      s.cases_dir = value;
    } else if (arg == "--mb") {
      s.megabytes = std::stod(value);
    } else if (arg == "--runs") {
      s.runs = std::max(1, std::stoi(value));
    } else if (arg == "--cache") {
      s.cache = std::stoul(value);
    } else {
      std::cerr << "dsv32-bench-tokenizer: unknown argument " << arg << '\n';
      std::exit(2);
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) try {
  const Settings s = parse(argc, argv);
  const auto t_load = Clock::now();
  const auto tokenizer = dsv32::Tokenizer::from_directory(s.tokenizer_dir, {.cache_capacity = s.cache});
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();

  std::vector<std::string> case_texts;
  for (const char* file : {"encode_cases.json", "reference_cases.json"}) {
    const auto j = dsv32::bpe::read_json_file((s.cases_dir.empty() ? s.tokenizer_dir : s.cases_dir) + "/" + file);
    for (const auto& c : j.contains("cases") ? j.at("cases") : j.at("encode")) case_texts.push_back(c.at("text"));
  }
  const std::vector<std::string> docs = make_corpus(s, case_texts);
  std::size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();

  std::vector<std::vector<std::int32_t>> ids(docs.size());
  std::vector<double> encode_s;
  std::size_t tokens = 0;
  for (int run = 0; run <= s.runs; ++run) {  // run 0 starts with a cold cache
    const auto t0 = Clock::now();
    for (std::size_t d = 0; d < docs.size(); ++d) ids[d] = tokenizer.encode(docs[d]);
    encode_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  for (const auto& v : ids) tokens += v.size();

  std::vector<double> decode_s;
  std::size_t decoded_bytes = 0;
  for (int run = 0; run < s.runs; ++run) {
    decoded_bytes = 0;
    const auto t0 = Clock::now();
    for (const auto& v : ids) decoded_bytes += tokenizer.decode(v).size();
    decode_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  if (decoded_bytes != bytes) {
    std::cerr << "dsv32-bench-tokenizer: decode did not give back the input (" << decoded_bytes << " vs " << bytes
              << " bytes)\n";
    return 1;
  }

  const double cold = encode_s.front();
  encode_s.erase(encode_s.begin());
  const double enc = median(encode_s);
  const double dec = median(decode_s);
  const double mb = static_cast<double>(bytes) / 1e6;
  std::cout << std::fixed << std::setprecision(2);
  std::cout << "tokenizer: " << s.tokenizer_dir << " (loaded in " << load_s << " s), word cache " << s.cache
            << " entries per thread\n";
  std::cout << "corpus: " << mb << " MB in " << docs.size() << " documents, " << tokens << " tokens ("
            << static_cast<double>(bytes) / static_cast<double>(tokens) << " bytes/token)\n";
  std::cout << "encode: median " << mb / enc << " MB/s, " << static_cast<double>(tokens) / enc / 1e6
            << " M tokens/s over " << s.runs << " runs (first, cold-cache run: " << mb / cold << " MB/s)\n";
  std::cout << "decode: median " << mb / dec << " MB/s, " << static_cast<double>(tokens) / dec / 1e6
            << " M tokens/s over " << s.runs << " runs\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "dsv32-bench-tokenizer: " << e.what() << '\n';
  return 1;
}
