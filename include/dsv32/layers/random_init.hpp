/// \file
/// \brief The synthetic weights of Transformer::init_random(): each parameter drawn by its role from a
///        counter-based normal stream keyed by (seed, name), FP8 weights quantized per 128x128 block.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dsv32/config/model_config.hpp"
#include "dsv32/config/tensor_table.hpp"
#include "dsv32/core/dtype.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/parallel_for_each.hpp"
#include "dsv32/core/random.hpp"
#include "dsv32/weights/parameter.hpp"

namespace dsv32::detail {

// Transformer::init_random's writer for load_weights(): writes each parameter's random values
// (Transformer::init_random documents the distributions) through the uploader. An FP8 weight's block
// scales are kept for the next tensor, its scale. Fmt: the config's scale_fmt.
template <class Backend, ScaleFmt Fmt>
class RandomInit {
 public:
  explicit RandomInit(std::uint64_t seed) : seed_(seed) {}

  // Writes parameter `p` to `dst` through `up`.
  void write(const Parameter<Backend>& p, WeightUploader<Backend>& up, void* dst) {
    const std::size_t n = static_cast<std::size_t>(p.numel());
    if (p.role() == TensorRole::scale) {
      DSV32_CHECK(pending_scale_.size() == n, state, "init_random: ", p.name(), " does not follow its weight");
      up.write(dst, DType::F32, n, [&](std::size_t first, std::size_t count, void* host) {
        std::memcpy(host, pending_scale_.data() + first, count * sizeof(float));
      });
      pending_scale_.clear();
      return;
    }
    const RandomFill fill = random_fill(p, seed_);
    if (p.dtype() == DType::F8_E4M3) {
      pending_scale_ = write_random_fp8(p, fill, up, dst);
      return;
    }
    DSV32_CHECK(p.dtype() == DType::F32 || p.dtype() == DType::BF16, unsupported, "init_random: a ",
                dtype_name(p.dtype()), " parameter (", p.name(), ")");
    up.write(dst, p.dtype(), n, [&](std::size_t first, std::size_t count, void* host) {
      const std::size_t elem = dtype_size(p.dtype());
      parallel_chunks(count, [&](std::size_t c0, std::size_t len) {
        Parameter<Backend>::encode_host(p.dtype(), first + c0, len, static_cast<std::byte*>(host) + c0 * elem,
                                        fill);
      });
    });
  }

 private:
  // init_random's distribution of one parameter: element i is mean + sd * N(0, 1)_i of its stream.
  struct RandomFill {
    NormalStream normal;
    float mean = 0.0f, sd = 1.0f;
    float operator()(std::size_t i) const noexcept { return mean + sd * normal(static_cast<std::uint64_t>(i)); }
  };

  // The distribution of parameter `p` by its role; its stream is keyed by (seed, name).
  static RandomFill random_fill(const Parameter<Backend>& p, std::uint64_t seed) {
    float mean = 0.0f, sd = 1.0f;
    switch (p.role()) {
      case TensorRole::norm: mean = 1.0f, sd = 0.1f; break;
      case TensorRole::bias: sd = 0.1f; break;
      case TensorRole::gate_bias: sd = 0.5f; break;
      case TensorRole::embedding: break;
      case TensorRole::weight: case TensorRole::head:
        sd = 1.0f / std::sqrt(static_cast<float>(p.shape()[p.shape().rank() - 1]));
        break;
      case TensorRole::scale: fail(ErrorKind::state, "init_random: scales are written with their weights");
    }
    return {NormalStream(mix64(fnv1a64(p.name()) ^ mix64(seed))), mean, sd};
  }

  // Calls f(c0, len) for consecutive chunks of [0, n) on all threads.
  template <class F>
  static void parallel_chunks(std::size_t n, F&& f) {
    constexpr std::size_t kChunk = std::size_t{1} << 16;
    parallel_for_each(static_cast<std::int64_t>((n + kChunk - 1) / kChunk), [&](std::int64_t c) {
      const std::size_t c0 = static_cast<std::size_t>(c) * kChunk;
      f(c0, std::min(kChunk, n - c0));
    });
  }

  // Writes FP8 weight `p` ([n, k], values from `fill`) quantized per 128x128 block with scale
  // max(amax / 448, 1e-12), rounded up to a power of two where the config's scale_fmt is ue8m0 (the
  // released V3.1 / V3.2 checkpoints' weight scales are); returns the scales ([ceil(n / 128),
  // ceil(k / 128)]). When the uploader asks for the whole tensor at once (host memory), each 128-row
  // block is drawn once, its scales taken and its codes written; otherwise the scales are taken
  // first and each chunk drawn again.
  static std::vector<float> write_random_fp8(const Parameter<Backend>& p, const RandomFill& fill,
                                             WeightUploader<Backend>& up, void* dst) {
    const std::int64_t n = p.shape()[0], k = p.shape()[1];
    const std::int64_t nb = (n + kBlockSize - 1) / kBlockSize, kb = (k + kBlockSize - 1) / kBlockSize;
    const auto total = static_cast<std::size_t>(n * k);
    std::vector<float> scales(static_cast<std::size_t>(nb * kb), 0.0f);
    bool scaled = false;
    // Draws rows [128 b, 128 b + 128) into `w` and sets their block scales; codes != nullptr: also
    // writes their E4M3 codes there (the block row's first code).
    auto block_row = [&](std::int64_t b, std::vector<float>& w, std::uint8_t* codes) {
      const std::int64_t r0 = b * kBlockSize, rows = std::min(kBlockSize, n - r0);
      w.resize(static_cast<std::size_t>(rows * k));
      float* s = scales.data() + b * kb;
      for (std::int64_t i = 0; i < rows * k; ++i) w[i] = fill(static_cast<std::size_t>(r0 * k + i));
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c0 = 0, j = 0; c0 < k; c0 += kBlockSize, ++j)
          for (std::int64_t c = c0; c < std::min(k, c0 + kBlockSize); ++c) s[j] = std::max(s[j], std::fabs(w[r * k + c]));
      for (std::int64_t j = 0; j < kb; ++j) {
        s[j] = std::max(s[j] / kE4m3Max, 1e-12f);
        if constexpr (Fmt == ScaleFmt::ue8m0) s[j] = ceil_pow2(s[j]);
      }
      if (codes == nullptr) return;
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c0 = 0, j = 0; c0 < k; c0 += kBlockSize, ++j)
          for (std::int64_t c = c0; c < std::min(k, c0 + kBlockSize); ++c) codes[r * k + c] = encode_e4m3(w[r * k + c] / s[j]);
    };
    up.write(dst, DType::F8_E4M3, total, [&](std::size_t first, std::size_t count, void* host) {
      auto* codes = static_cast<std::uint8_t*>(host);
      if (first == 0 && count == total) {
        parallel_for_each(nb, [&](std::int64_t b) {
          std::vector<float> w;
          block_row(b, w, codes + b * kBlockSize * k);
        });
        scaled = true;
        return;
      }
      if (!scaled) {
        parallel_for_each(nb, [&](std::int64_t b) {
          std::vector<float> w;
          block_row(b, w, nullptr);
        });
        scaled = true;
      }
      parallel_chunks(count, [&](std::size_t c0, std::size_t len) {
        for (std::size_t i = first + c0; i < first + c0 + len; ++i) {
          const auto r = static_cast<std::int64_t>(i) / k, c = static_cast<std::int64_t>(i) % k;
          codes[i - first] = encode_e4m3(fill(i) / scales[(r / kBlockSize) * kb + c / kBlockSize]);
        }
      });
    });
    return scales;
  }

  std::uint64_t seed_;
  std::vector<float> pending_scale_;  // an FP8 weight's block scales, written with the next tensor (its scale)
};

}  // namespace dsv32::detail
