/// \file
/// \brief ServerMetrics: a server's counters and latency histograms, and with an Engine's figures
///        (EngineStats) the Prometheus text exposition that dsv32-server's `GET /metrics` returns.
///
/// Every name starts with `dsv32_`; docs/serving.md lists them. Counters and histograms are
/// updated from any thread (one mutex: a handful of updates per request).
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dsv32/generate/generate.hpp"
#include "dsv32/serving/engine.hpp"

namespace dsv32 {

/// \addtogroup serving
/// @{

/// \brief A Prometheus histogram: counts of observations at or below each upper bound, their sum
///        and count. Not synchronized (ServerMetrics locks around it).
class Histogram {
 public:
  /// \param upper_bounds the buckets' upper bounds, increasing (`+Inf` is implied)
  explicit Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), counts_(bounds_.size(), 0) {}

  /// \brief Records one value.
  /// \param v the observation (seconds, for the server's histograms)
  void observe(double v) {
    for (std::size_t i = 0; i < bounds_.size(); ++i) {
      if (v <= bounds_[i]) ++counts_[i];
    }
    sum_ += v;
    ++count_;
  }

  /// \brief Observations recorded.
  std::uint64_t count() const noexcept { return count_; }

  /// \brief Appends the histogram in the text exposition format: `# HELP`, `# TYPE`, cumulative
  ///        `name_bucket{le="..."}` lines, `name_sum`, `name_count`.
  /// \param out  the text
  /// \param name the metric's name
  /// \param help its description
  void render(std::string& out, std::string_view name, std::string_view help) const {
    out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name).append(" histogram\n");
    for (std::size_t i = 0; i < bounds_.size(); ++i) {
      out.append(name).append("_bucket{le=\"").append(number(bounds_[i])).append("\"} ");
      out.append(std::to_string(counts_[i])).append("\n");
    }
    out.append(name).append("_bucket{le=\"+Inf\"} ").append(std::to_string(count_)).append("\n");
    out.append(name).append("_sum ").append(number(sum_)).append("\n");
    out.append(name).append("_count ").append(std::to_string(count_)).append("\n");
  }

  /// \brief A value as Prometheus reads it: integers as integers, others in the shortest decimal that
  ///        reads back the same double.
  /// \param v the value
  static std::string number(double v) {
    char buf[32] = {};
    if (v == static_cast<double>(static_cast<std::int64_t>(v)) && v > -9e15 && v < 9e15) {
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
      return buf;
    }
    for (int precision = 1; precision <= 17; ++precision) {
      std::snprintf(buf, sizeof buf, "%.*g", precision, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
    return buf;
  }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

/// \brief What a server counts: HTTP requests by endpoint and status, tokens, and per-request
///        latencies; render() adds the engine's figures.
class ServerMetrics {
 public:
  ServerMetrics()
      : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}),
        tpot_({0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 10}),
        e2e_({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 300, 600}) {}

  /// \brief Counts one HTTP response.
  /// \param endpoint the route (`/v1/chat/completions`, ...; `other` for unknown paths)
  /// \param status   its HTTP status
  void count_response(const std::string& endpoint, int status) {
    std::lock_guard<std::mutex> lock(mu_);
    ++responses_[{endpoint, status}];
  }

  /// \brief Records a finished generation.
  /// \param prompt_tokens     its prompt's tokens
  /// \param generated_tokens  its completion's tokens
  /// \param ttft_s            submit to first token (not recorded without tokens)
  /// \param tpot_s            mean time between later tokens (not recorded with fewer than two)
  /// \param e2e_s             submit to the end
  void record_generation(std::int64_t prompt_tokens, std::int64_t generated_tokens, double ttft_s, double tpot_s,
                         double e2e_s) {
    std::lock_guard<std::mutex> lock(mu_);
    prompt_tokens_ += prompt_tokens;
    generated_tokens_ += generated_tokens;
    if (generated_tokens > 0) ttft_.observe(ttft_s);
    if (generated_tokens > 1) tpot_.observe(tpot_s);
    e2e_.observe(e2e_s);
  }

  /// \brief Counts a request cancelled because its client went away.
  void count_disconnect() {
    std::lock_guard<std::mutex> lock(mu_);
    ++disconnects_;
  }

  /// \brief The text exposition (Prometheus 0.0.4) of these counters and of `engine`.
  /// \param engine the engine's figures now
  std::string render(const EngineStats& engine) const {
    std::string out;
    auto metric = [&](std::string_view name, std::string_view type, std::string_view help) {
      out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name).append(" ");
      out.append(type).append("\n");
    };
    auto value = [&](std::string_view name, std::string_view labels, double v) {
      out.append(name);
      if (!labels.empty()) out.append("{").append(labels).append("}");
      out.append(" ").append(Histogram::number(v)).append("\n");
    };
    std::lock_guard<std::mutex> lock(mu_);
    metric("dsv32_http_requests_total", "counter", "HTTP responses by endpoint and status code.");
    for (const auto& [key, n] : responses_) {
      value("dsv32_http_requests_total",
            "endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"", static_cast<double>(n));
    }
    metric("dsv32_client_disconnects_total", "counter", "Streamed requests cancelled because the client went away.");
    value("dsv32_client_disconnects_total", "", static_cast<double>(disconnects_));
    metric("dsv32_prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
    value("dsv32_prompt_tokens_total", "", static_cast<double>(prompt_tokens_));
    metric("dsv32_generation_tokens_total", "counter", "Completion tokens of finished requests.");
    value("dsv32_generation_tokens_total", "", static_cast<double>(generated_tokens_));
    ttft_.render(out, "dsv32_time_to_first_token_seconds", "Time from arrival to the first completion token.");
    tpot_.render(out, "dsv32_time_per_output_token_seconds", "Mean time between a request's completion tokens after the first.");
    e2e_.render(out, "dsv32_e2e_request_latency_seconds", "Time from arrival to the last token of finished requests.");
    metric("dsv32_requests_running", "gauge", "Requests admitted by the engine (prefilling or decoding).");
    value("dsv32_requests_running", "", static_cast<double>(engine.running));
    metric("dsv32_requests_waiting", "gauge", "Requests queued for admission (preempted ones included).");
    value("dsv32_requests_waiting", "", static_cast<double>(engine.waiting));
    metric("dsv32_cache_pages", "gauge", "Pages of the paged cache by state: used by requests, cached for prefix reuse, free.");
    value("dsv32_cache_pages", "state=\"used\"", static_cast<double>(engine.pages_used));
    value("dsv32_cache_pages", "state=\"cached\"", static_cast<double>(engine.pages_cached));
    value("dsv32_cache_pages", "state=\"free\"", static_cast<double>(engine.pages_free));
    metric("dsv32_cache_page_size", "gauge", "Positions per cache page.");
    value("dsv32_cache_page_size", "", static_cast<double>(engine.page_size));
    metric("dsv32_prefix_cache_queries_total", "counter", "Prompt tokens admitted (the prefix cache's queries).");
    value("dsv32_prefix_cache_queries_total", "", static_cast<double>(engine.prompt_tokens));
    metric("dsv32_prefix_cache_hits_total", "counter", "Prompt tokens taken from the prefix cache.");
    value("dsv32_prefix_cache_hits_total", "", static_cast<double>(engine.prefix_hit_tokens));
    metric("dsv32_preemptions_total", "counter", "Sequences preempted for pages (and recomputed later).");
    value("dsv32_preemptions_total", "", static_cast<double>(engine.preemptions));
    metric("dsv32_engine_steps_total", "counter", "Forward passes the engine ran.");
    value("dsv32_engine_steps_total", "", static_cast<double>(engine.steps));
    metric("dsv32_requests_finished_total", "counter", "Requests the engine finished, by reason.");
    for (int r = 0; r < 6; ++r) {
      value("dsv32_requests_finished_total", std::string("reason=\"") + to_string(static_cast<FinishReason>(r)) + "\"",
            static_cast<double>(engine.finished_by[r]));
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, std::uint64_t> responses_;
  std::uint64_t disconnects_ = 0;
  std::int64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  Histogram ttft_, tpot_, e2e_;
};

/// @}

}  // namespace dsv32
