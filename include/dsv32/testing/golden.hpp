/// \file
/// \brief Golden replay: run a config and checkpoint against reference vectors, call by call.
///
/// A scenario directory holds `config.json` (the reference's ModelArgs fields), the checkpoint
/// `model0-mp1.safetensors`, `manifest.json` (the forward calls the reference made) and
/// `expected.safetensors` (its logits of every call, indexer picks, and prefill intermediates).
/// replay_golden() replays every call and reports, per call, the logits error, the indexer top-k
/// agreement, and for the prefill the expert choices, gate weights and intermediates.
/// \code
/// auto report = dsv32::testing::replay_golden<MyConfig>("path/to/scenario");
/// std::cout << report.summary();
/// if (!report.passed()) return 1;
/// \endcode
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv32/backend/cpu/kernels.hpp"
#include "dsv32/config/model_args.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/io/checkpoint.hpp"
#include "dsv32/io/safetensors.hpp"
#include "dsv32/layers/transformer.hpp"

namespace dsv32::testing {

/// \defgroup testing Testing
/// \brief Replaying reference vectors against a config and checkpoint.
/// @{

/// \brief Pass/fail thresholds (the defaults are the project's acceptance criteria).
struct GoldenTolerances {
  double logits = 1e-3;         ///< max |logit error| / max |reference logit|, per call
  double gate_weights = 1e-3;   ///< relative error of each gate weight (same experts chosen)
  double intermediates = 2e-2;  ///< max |error| / max |reference| of each prefill intermediate
};

/// \brief Agreement of one forward call with the reference.
struct GoldenCallReport {
  std::size_t index = 0;                  ///< the call's place in the scenario, from 0
  std::int64_t start_pos = 0;             ///< the call's start_pos
  std::int64_t batch = 0;                 ///< sequences in the call
  std::int64_t seq = 0;                   ///< tokens per sequence in the call
  double logits_error = 0;                ///< max |ours - ref| / max |ref|
  std::int64_t topk_queries = 0;          ///< (layer, sequence, query) picks compared
  std::int64_t topk_mismatches = 0;       ///< of those, how many differ as sets (visible picks only)
  std::int64_t gate_rows = 0;             ///< (layer, token) routings compared (prefill only)
  std::int64_t gate_mismatches = 0;       ///< of those, how many chose other experts
  double gate_weight_error = 0;           ///< max relative weight error where the experts agree
  double intermediate_error = 0;          ///< max over the prefill intermediates
  std::string worst_intermediate;         ///< which one that was
  std::int64_t intermediates = 0;         ///< prefill intermediates compared (the vectors hold them all)
  std::int64_t gate_layers = 0;           ///< MoE layers whose routing was compared (prefill only)
  std::vector<std::string> missing;       ///< what the vectors hold but the run did not report
  std::vector<std::string> extra;         ///< what the run reported but the vectors do not hold
  std::vector<std::string> notes;         ///< first few disagreements, in words
};

/// \brief Agreement of a whole scenario.
struct GoldenReport {
  std::string scenario;                ///< the scenario's name (its directory under the golden data)
  std::vector<GoldenCallReport> calls;  ///< one report per forward call, in order
  GoldenTolerances tolerances;          ///< what passed() compares against

  /// \brief Whether every call is within the tolerances with identical top-k sets and experts.
  bool passed() const {
    for (const auto& c : calls)
      if (c.logits_error > tolerances.logits || c.topk_mismatches || c.gate_mismatches ||
          c.gate_weight_error > tolerances.gate_weights || c.intermediate_error > tolerances.intermediates ||
          !c.missing.empty() || !c.extra.empty())
        return false;
    return !calls.empty();
  }
  /// \brief The largest logits_error over the calls (0 without calls).
  double max_logits_error() const {
    double m = 0;
    for (const auto& c : calls) m = std::max(m, c.logits_error);
    return m;
  }
  /// \brief One line per call and a verdict.
  std::string summary() const {
    std::ostringstream os;
    os << scenario << ": " << calls.size() << " calls, " << (passed() ? "PASS" : "FAIL") << '\n';
    for (const auto& c : calls) {
      os << "  call " << c.index << " start_pos " << c.start_pos << " [" << c.batch << "x" << c.seq << "]: logits err "
         << c.logits_error << ", top-k " << c.topk_queries - c.topk_mismatches << "/" << c.topk_queries << " agree";
      if (c.gate_rows) os << ", experts " << c.gate_rows - c.gate_mismatches << "/" << c.gate_rows << " agree (weight err " << c.gate_weight_error << ")";
      if (!c.worst_intermediate.empty())
        os << ", " << c.intermediates << " intermediates err " << c.intermediate_error << " (" << c.worst_intermediate << ")";
      os << '\n';
      for (const auto& m : c.missing) os << "    missing from the run: " << m << '\n';
      for (const auto& m : c.extra) os << "    not in the vectors: " << m << '\n';
      for (const auto& n : c.notes) os << "    " << n << '\n';
    }
    return os.str();
  }
};

namespace detail {

inline std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo& t = f.at(name);
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  t.read_as_f32(v.data());
  return v;
}

inline std::vector<std::int64_t> read_i64(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo& t = f.at(name);
  DSV32_CHECK(t.dtype == DType::I64, invalid_file, t.where(), " must be I64");
  std::vector<std::int64_t> v(static_cast<std::size_t>(t.numel()));
  t.copy_to(v.data());
  return v;
}

/// max |a - b| / max |b|
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, mx = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    mx = std::max(mx, std::fabs(static_cast<double>(b[i])));
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return mx > 0 ? err / mx : err;
}

/// How every position's logits agree with expected ones ([batch, positions, vocab] f32, as `Logits`).
struct RowAgreement {
  double worst = 0.0;                ///< the largest max |a - e| / max |e| of any row
  std::int64_t argmax_differs = 0;   ///< rows whose argmax differs
};
inline RowAgreement compare_rows(const Logits& ours, const std::vector<float>& expected) {
  DSV32_CHECK(expected.size() == ours.values.size(), invalid_argument, "compare_rows: ", expected.size(),
              " expected values against ", ours.values.size());
  RowAgreement r;
  const std::int64_t V = ours.vocab;
  for (std::int64_t b = 0; b < ours.batch; ++b)
    for (std::int64_t p = 0; p < ours.positions; ++p) {
      const float* e = expected.data() + (b * ours.positions + p) * V;
      const auto a = ours.row(b, p);
      double err = 0.0, mag = 0.0;
      for (std::int64_t v = 0; v < V; ++v) {
        err = std::max(err, std::fabs(static_cast<double>(a[v]) - e[v]));
        mag = std::max(mag, std::fabs(static_cast<double>(e[v])));
      }
      r.worst = std::max(r.worst, mag > 0 ? err / mag : err);
      r.argmax_differs += (std::max_element(e, e + V) - e) != (std::max_element(a.begin(), a.end()) - a.begin());
    }
  return r;
}

/// Records what the model reports during one call.
class Recorder : public ForwardObserver {
 public:
  bool prefill_details = false;
  std::map<int, std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::int32_t>>> topk;
  std::map<std::string, std::vector<float>> activations;
  std::map<int, std::vector<float>> gate_weights;
  std::map<int, std::vector<std::int32_t>> gate_experts;
  std::int64_t gate_k = 0;

  void on_embedding(MatrixView<const bf16> h) override { keep("prefill.embed", h); }
  void on_indexer_topk(int layer, std::int64_t b, std::int64_t s, std::span<const std::int32_t> p) override {
    topk[layer][{b, s}].assign(p.begin(), p.end());
  }
  void on_attention(int layer, MatrixView<const bf16> out) override {
    keep("prefill.layers." + std::to_string(layer) + ".attn_out", out);
  }
  void on_gate(int layer, MatrixView<const float> w, MatrixView<const std::int32_t> e) override {
    if (!prefill_details) return;
    gate_k = w.cols;
    auto& wv = gate_weights[layer];
    auto& ev = gate_experts[layer];
    for (std::int64_t r = 0; r < w.rows; ++r) {
      wv.insert(wv.end(), w.row(r), w.row(r) + w.cols);
      ev.insert(ev.end(), e.row(r), e.row(r) + e.cols);
    }
  }
  void on_block(int layer, MatrixView<const bf16> x, MatrixView<const bf16> residual) override {
    keep("prefill.layers." + std::to_string(layer) + ".x", x);
    keep("prefill.layers." + std::to_string(layer) + ".residual", residual);
  }

 private:
  void keep(const std::string& key, MatrixView<const bf16> m) {
    if (!prefill_details) return;
    auto& v = activations[key];
    v.clear();
    for (std::int64_t r = 0; r < m.rows; ++r)
      for (std::int64_t c = 0; c < m.cols; ++c) v.push_back(static_cast<float>(m.row(r)[c]));
  }
};

inline void note(GoldenCallReport& r, const std::string& s) {
  if (r.notes.size() < 8) r.notes.push_back(s);
}

}  // namespace detail

/// \brief Replays a golden scenario through Transformer<Config, Backend>.
///
/// Every call's logits, every layer's indexer picks of every call, and for the prefill every
/// intermediate and every MoE layer's routing the vectors hold are compared; anything the vectors hold
/// that the run did not report (an observer hook a backend forgot), or the reverse, is listed in the
/// call's report and fails it. Works on any backend: observers receive host copies.
/// Throws Error if the scenario's config.json disagrees with Config (every field is listed), or its
/// files are missing or malformed (including logits of the wrong size).
/// \tparam Config  compile-time config the scenario was generated with
/// \tparam Backend backend tag
/// \param dir    the scenario's directory
/// \param tol    the acceptance tolerances
/// \param adjust called on the scenario's runtime options before the model is built (e.g. to set
///               RuntimeOptions::absorbed_prefill_from); none by default
/// \param setup  called on the model's execution context before the replay (e.g. to set the CPU
///               backend's ExecutionContext<Cpu>::kernels); none by default
template <class Config, class Backend = Cpu>
GoldenReport replay_golden(const std::filesystem::path& dir, const GoldenTolerances& tol = {},
                           const std::function<void(RuntimeOptions&)>& adjust = {},
                           const std::function<void(ExecutionContext<Backend>&)>& setup = {}) {
  const ModelArgs args = ModelArgs::from_file(dir / "config.json");
  args.check_matches<Config>((dir / "config.json").string());
  RuntimeOptions runtime = args.runtime;
  if (adjust) adjust(runtime);
  Transformer<Config, Backend> model(runtime);
  if (setup) setup(model.context());
  load_checkpoint(model, dir / "model0-mp1.safetensors");

  std::ifstream in(dir / "manifest.json");
  DSV32_CHECK(in.good(), io, "cannot open ", (dir / "manifest.json").string());
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::invalid_file, (dir / "manifest.json").string(), ": ", e.what());
  }
  const auto expected = SafetensorsFile::open(dir / "expected.safetensors");

  GoldenReport report;
  report.scenario = dir.filename().string();
  report.tolerances = tol;
  std::size_t index = 0;
  for (const auto& call : manifest.at("calls")) {
    const auto tokens = call.at("tokens").get<std::vector<std::vector<std::int32_t>>>();
    const std::int64_t start = call.at("start_pos").get<std::int64_t>();
    detail::Recorder rec;
    rec.prefill_details = index == 0;
    const Logits logits = model.forward(tokens, start, ForwardOptions{false, &rec});

    GoldenCallReport r;
    r.index = index;
    r.start_pos = start;
    r.batch = logits.batch;
    r.seq = static_cast<std::int64_t>(tokens[0].size());
    const std::string step = "step" + std::to_string(index);
    {
      const auto ref = detail::read_f32(*expected, step + ".logits");
      DSV32_CHECK(ref.size() == logits.values.size(), invalid_file, step, ".logits holds ", ref.size(),
                  " values, the model produced ", logits.values.size(), " (batch ", logits.batch, " x vocab ",
                  logits.vocab, ")");
      r.logits_error = detail::relative_error(logits.values, ref);
    }

    for (int layer = 0; layer < Config::n_layers; ++layer) {
      const std::string key = step + ".layers." + std::to_string(layer) + ".topk";
      const TensorInfo& t = expected->at(key);
      DSV32_CHECK(t.rank() == 3 && t.shape[0] == r.batch && t.shape[1] == r.seq, invalid_file, t.where(), " has shape ",
                  t.shape_str(), ", expected [", r.batch, ", ", r.seq, ", k]");
      const auto ref = detail::read_i64(*expected, key);
      const std::int64_t k = t.shape[2];
      const auto reported = rec.topk.find(layer);
      if (reported == rec.topk.end()) r.missing.push_back(key);
      for (std::int64_t b = 0; b < r.batch; ++b)
        for (std::int64_t s = 0; s < r.seq; ++s) {
          const std::int64_t visible = start + s + 1;
          std::set<std::int64_t> want, got;
          for (std::int64_t j = 0; j < k; ++j) {
            const std::int64_t p = ref[(b * r.seq + s) * k + j];
            if (p >= 0 && p < visible) want.insert(p);
          }
          if (reported != rec.topk.end())
            if (const auto q = reported->second.find({b, s}); q != reported->second.end())
              got.insert(q->second.begin(), q->second.end());
          ++r.topk_queries;
          if (want != got) {
            ++r.topk_mismatches;
            detail::note(r, "layer " + std::to_string(layer) + " sequence " + std::to_string(b) + " query " +
                                std::to_string(s) + ": indexer picks differ");
          }
        }
    }
    for (const auto& [layer, picks] : rec.topk)
      if (layer < 0 || layer >= Config::n_layers) r.extra.push_back(step + ".layers." + std::to_string(layer) + ".topk");

    if (index == 0) {
      // every activation the vectors hold for the prefill, and nothing else
      for (const TensorInfo& t : expected->tensors()) {
        const bool activation = t.name.starts_with("prefill.") && !t.name.ends_with(".gate_weights") &&
                                !t.name.ends_with(".gate_indices");
        if (activation && !rec.activations.count(t.name)) r.missing.push_back(t.name);
      }
      for (const auto& [key, ours] : rec.activations) {
        if (!expected->find(key)) {
          r.extra.push_back(key);
          continue;
        }
        const auto ref = detail::read_f32(*expected, key);
        DSV32_CHECK(ref.size() == ours.size(), invalid_file, key, " holds ", ref.size(), " values, the model produced ",
                    ours.size());
        ++r.intermediates;
        const double e = detail::relative_error(ours, ref);
        if (e >= r.intermediate_error) {
          r.intermediate_error = e;
          r.worst_intermediate = key;
        }
      }
      // every MoE layer's routing the vectors hold, and nothing else
      for (int layer = 0; layer < Config::n_layers; ++layer) {
        const std::string base = "prefill.layers." + std::to_string(layer);
        const bool in_vectors = expected->find(base + ".gate_indices") != nullptr;
        const bool reported = rec.gate_weights.count(layer) != 0;
        if (in_vectors && !reported) r.missing.push_back(base + ".gate_indices");
        if (!in_vectors && reported) r.extra.push_back(base + ".gate_indices");
      }
      for (const auto& [layer, ours_w] : rec.gate_weights) {
        const std::string base = "prefill.layers." + std::to_string(layer);
        if (!expected->find(base + ".gate_indices")) continue;
        const auto ref_e = detail::read_i64(*expected, base + ".gate_indices");
        const auto ref_w = detail::read_f32(*expected, base + ".gate_weights");
        const auto& ours_e = rec.gate_experts[layer];
        const std::int64_t k = rec.gate_k, rows = static_cast<std::int64_t>(ours_e.size()) / k;
        DSV32_CHECK(static_cast<std::int64_t>(ref_e.size()) == rows * k, invalid_file, base,
                    ".gate_indices does not match the model's routing shape");
        ++r.gate_layers;
        for (std::int64_t t = 0; t < rows; ++t) {
          std::map<std::int64_t, double> want, got;
          for (std::int64_t j = 0; j < k; ++j) {
            want[ref_e[t * k + j]] = ref_w[t * k + j];
            got[ours_e[t * k + j]] = ours_w[t * k + j];
          }
          ++r.gate_rows;
          bool same = want.size() == got.size();
          for (const auto& [e, w] : want) same = same && got.count(e);
          if (!same) {
            ++r.gate_mismatches;
            detail::note(r, "layer " + std::to_string(layer) + " token " + std::to_string(t) + ": experts differ");
            continue;
          }
          for (const auto& [e, w] : want)
            r.gate_weight_error = std::max(r.gate_weight_error, std::fabs(got[e] - w) / std::max(std::fabs(w), 1e-30));
        }
      }
    }
    report.calls.push_back(std::move(r));
    ++index;
  }
  return report;
}

/// @}

}  // namespace dsv32::testing
