// dsv32-bench-cuda: the CUDA backend on the 671B model's shapes with random weights (device-filled):
//  1. the device's memory bandwidth, measured by a copy kernel in this run;
//  2. every GEMM of one dense layer and one MoE layer (FP8 weights, bf16 activations) at M = 1, 8, 64
//     (decode) and 2048 (prefill): Kernels<Cuda>::linear (quantization + cuBLASLt) next to a bare
//     cuBLASLt call of the same shape on pre-quantized operands, in ms and TFLOP/s;
//  3. attention and the indexer against context length (1K, 4K, 16K; decode at batch 1, 8, 64), and a
//     2K-token prefill on the path it takes by default (absorbed: absorb_query, latent_attention with
//     the block table of one page, project_values; the expanded sparse_attention of shorter prefills for comparison);
//  4. the routed experts as the MoE layer runs them on Cuda: the plan and one grouped call over 256
//     experts (8 per token) at 1, 8, 64 and 2048 tokens;
//  5. per layer, decode at batch 1, 8, 64 with a 4K context and prefill of 2K tokens: the sum of its
//     kernels' times (what it leaves out is printed), and for decode the bytes it reads / time / the
//     measured bandwidth.
// Times are medians of CUDA-event-timed repetitions. Without a device it prints SKIPPED and exits 0.
//   dsv32-bench-cuda [reps]
#include <dsv32/cuda.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

using namespace dsv32;
using K = Kernels<Cuda>;
using Mem = Memory<Cuda>;
using Space = cuda::DeviceSpace;

// Deterministic pseudo-random fill on the device: bf16 N(0, ~sd), E4M3 codes, f32 in [lo, hi).
template <int Threads>
__global__ void fill_kernel(void* p, std::int64_t n, int kind, float a, float b, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(Threads) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * Threads) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float u = static_cast<float>(h & 0xFFFFFF) / 16777216.0f;  // [0, 1)
    if (kind == 0) static_cast<std::uint16_t*>(p)[i] = cuda::float_to_bf16((u - 0.5f) * a);
    else if (kind == 1) static_cast<std::uint8_t*>(p)[i] = dsv32::encode_e4m3((u - 0.5f) * a);
    else static_cast<float*>(p)[i] = a + u * (b - a);
  }
}

template <int Threads>
__global__ void copy_kernel(const int4* src, int4* dst, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(Threads) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * Threads)
    dst[i] = src[i];
}

struct Buf {
  void* p = nullptr;
  std::size_t bytes = 0;
  Buf() = default;
  explicit Buf(std::size_t b) : p(Mem::allocate(b)), bytes(b) {}
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  Buf(Buf&& o) noexcept : p(o.p), bytes(o.bytes) { o.p = nullptr; }
  ~Buf() { Mem::deallocate(p); }
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

// A ragged pass's cache addressing on the device (CachePages): `n` queries, query i of sequence
// seq(i) at position pos(i); sequence b's positions in page b of `page_size` positions (the
// rectangular layout).
struct Paged {
  Buf table, sequence, position;
  CachePages<cuda::DeviceSpace> view;
  template <class Seq, class Pos>
  Paged(std::int64_t sequences, std::int64_t n, std::int64_t page_size, Seq&& seq, Pos&& pos)
      : table(static_cast<std::size_t>(sequences) * 4), sequence(static_cast<std::size_t>(n) * 4),
        position(static_cast<std::size_t>(n) * 4) {
    std::vector<std::int32_t> t(static_cast<std::size_t>(sequences)), q(static_cast<std::size_t>(n)), p(q.size());
    std::int64_t visible = 0;
    for (std::int64_t b = 0; b < sequences; ++b) t[b] = static_cast<std::int32_t>(b);
    for (std::int64_t i = 0; i < n; ++i) {
      q[i] = static_cast<std::int32_t>(seq(i));
      p[i] = static_cast<std::int32_t>(pos(i));
      visible = std::max<std::int64_t>(visible, p[i] + 1);
    }
    Mem::copy_from_host(table.p, t.data(), t.size() * 4);
    Mem::copy_from_host(sequence.p, q.data(), q.size() * 4);
    Mem::copy_from_host(position.p, p.data(), p.size() * 4);
    view = {{table.as<const std::int32_t>(), sequences, 1, 1}, {sequence.as<const std::int32_t>(), n},
            {position.as<const std::int32_t>(), n}, page_size, visible};
  }
};

std::uint32_t g_seed = 1;
Buf filled(ExecutionContext<Cuda>& ctx, std::int64_t n, int kind, float a = 1.0f, float b = 1.0f) {
  const std::size_t elem = kind == 0 ? 2 : (kind == 1 ? 1 : 4);
  Buf buf(static_cast<std::size_t>(n) * elem);
  fill_kernel<256><<<4096, 256, 0, ctx.stream()>>>(buf.p, n, kind, a, b, g_seed++);
  DSV32_CUDA_CHECK_LAUNCH("fill_kernel");
  return buf;
}

// Median of `reps` event-timed runs of f (after one warm-up), in ms.
double time_ms(ExecutionContext<Cuda>& ctx, int reps, const std::function<void()>& f) {
  const cuda::Event start = cuda::make_event(), stop = cuda::make_event();
  f();
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    DSV32_CUDA_CHECK(cudaEventRecord(start.get(), ctx.stream()));
    f();
    DSV32_CUDA_CHECK(cudaEventRecord(stop.get(), ctx.stream()));
    DSV32_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0;
    DSV32_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Gemm {
  const char* name;
  std::int64_t out, in;
  int count;  // how many such products one layer runs per token group (e.g. 3 per expert)
};

// A weight of the layer: FP8 codes and block scales.
struct Fp8Weight {
  Buf codes, scales;
  std::int64_t out, in;
  WeightView<Space> view() const {
    return {DType::F8_E4M3, codes.p, out, in, scales.as<float>()};
  }
};

Fp8Weight make_weight(ExecutionContext<Cuda>& ctx, std::int64_t out, std::int64_t in) {
  const std::int64_t ns = (out + 127) / 128 * ((in + 127) / 128);
  return {filled(ctx, out * in, 1, 400.0f), filled(ctx, ns, 2, 1e-4f, 3e-4f), out, in};
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 10;
  if (!cuda::device_available()) {
    std::printf("dsv32-bench-cuda: SKIPPED: no CUDA device\n");
    return 0;
  }
  ExecutionContext<Cuda> ctx;
  cudaDeviceProp prop{};
  DSV32_CUDA_CHECK(cudaGetDeviceProperties(&prop, ctx.device()));
  std::printf("device: %s, %d SMs, %.1f GiB, compute capability %d\n", prop.name, prop.multiProcessorCount,
              static_cast<double>(prop.totalGlobalMem) / (1u << 30), ctx.compute_capability());

  // ------------------------------------------------------------------ 1. bandwidth
  double bandwidth = 0;
  {
    const std::int64_t bytes = std::int64_t{2} << 30;
    Buf a(bytes), b(bytes);
    DSV32_CUDA_CHECK(cudaMemsetAsync(a.p, 1, bytes, ctx.stream()));
    const std::int64_t n = bytes / 16;
    const double ms = time_ms(ctx, reps, [&] {
      copy_kernel<256><<<prop.multiProcessorCount * 8, 256, 0, ctx.stream()>>>(a.as<int4>(), b.as<int4>(), n);
    });
    bandwidth = 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
    std::printf("\ncopy kernel: %.2f GiB read + written in %.3f ms: %.0f GB/s\n", 2.0 * bytes / (1u << 30), ms, bandwidth);
  }

  // ------------------------------------------------------------------ 2. GEMMs
  const Gemm dense[] = {{"wq_a", 1536, 7168, 1},      {"wq_b", 128 * 192, 1536, 1}, {"wkv_a", 576, 7168, 1},
                        {"wo", 7168, 128 * 128, 1},    {"idx wq_b", 64 * 128, 1536, 1}, {"idx wk", 128, 7168, 1},
                        {"w1/w3 dense", 18432, 7168, 2}, {"w2 dense", 7168, 18432, 1}};
  const Gemm moe[] = {{"w1/w3 expert", 2048, 7168, 2}, {"w2 expert", 7168, 2048, 1}};
  const std::int64_t Ms[] = {1, 8, 64, 2048};
  std::printf("\n%-14s %6s %6s %6s | %9s %8s | %9s %8s\n", "GEMM (FP8)", "N", "K", "M", "dsv32 ms", "TFLOP/s",
              "bare ms", "TFLOP/s");
  Buf x = filled(ctx, 2048 * 18432, 0, 4.0f), y(2048 * 18432 * 2);
  Buf xq(2048 * 18432), xs(2048 * 18432 / 128 * 4);
  // gemm_ms[name][M index]: the dsv32 time, for the per-layer sums below
  std::vector<std::vector<double>> gemm_ms;
  auto bench_gemm = [&](const Gemm& g) {
    // enough copies of the weight that the timed calls cycling through them read more than the L2 holds
    const std::int64_t copies = std::clamp<std::int64_t>((std::int64_t{256} << 20) / (g.out * g.in), 1, 16);
    std::vector<Fp8Weight> ws;
    for (std::int64_t c = 0; c < copies; ++c) ws.push_back(make_weight(ctx, g.out, g.in));
    const Fp8Weight& w = ws[0];
    std::size_t next = 0;
    std::vector<double> row;
    for (const std::int64_t M : Ms) {
      const MatrixView<const bf16, Space> xv{x.as<bf16>(), M, g.in, g.in};
      const MatrixView<bf16, Space> yv{y.as<bf16>(), M, g.out, g.out};
      const double ours = time_ms(ctx, reps, [&] {
        K::linear(ctx, xv, ws[next++ % ws.size()].view(), ScaleFmt::ue8m0, yv);
      });
      // the bare cuBLASLt product of the same shape on already-quantized operands
      cuda::GemmRequest req{DType::F8_E4M3, false, M, g.out, g.in, g.in, g.out, true};
      const cuda::GemmPlan p = cuda::plan_linear(req, std::size_t{1} << 40);
      const std::int64_t rows = p.gemm_rows(M);
      cuda::launch_act_quant(ctx, reinterpret_cast<const cuda::bf16_bits*>(x.p), g.in, M, rows, g.in, true,
                             xq.as<std::uint8_t>(), g.in, xs.as<float>(), 1, rows);
      const cuda::GemmKey key = cuda::gemm_key(p, M, reinterpret_cast<std::uintptr_t>(w.codes.p),
                                               reinterpret_cast<std::uintptr_t>(xq.p), reinterpret_cast<std::uintptr_t>(y.p));
      double bare = -1;
      if (!p.repack_w_scales && cuda::run_matmul(ctx, key, w.codes.p, xq.p, y.p, w.scales.as<float>(), xs.as<float>()))
        bare = time_ms(ctx, reps, [&] {
          const Fp8Weight& wc = ws[next++ % ws.size()];
          cuda::run_matmul(ctx, key, wc.codes.p, xq.p, y.p, wc.scales.as<float>(), xs.as<float>());
        });
      const double flop = 2.0 * static_cast<double>(M) * g.out * g.in;
      std::printf("%-14s %6lld %6lld %6lld | %9.4f %8.1f | %9.4f %8.1f\n", g.name, static_cast<long long>(g.out),
                  static_cast<long long>(g.in), static_cast<long long>(M), ours, flop / (ours * 1e-3) / 1e12, bare,
                  bare > 0 ? flop / (bare * 1e-3) / 1e12 : 0.0);
      row.push_back(ours * g.count);
    }
    gemm_ms.push_back(row);
  };
  for (const auto& g : dense) bench_gemm(g);
  for (const auto& g : moe) bench_gemm(g);
  auto gemm_sum = [&](std::size_t first, std::size_t last, int mi) {
    double t = 0;
    for (std::size_t i = first; i < last; ++i) t += gemm_ms[i][mi];
    return t;
  };

  // ------------------------------------------------------------------ 3. attention and indexer
  const std::int64_t H = 128, C = 512, rope = 64, topk = 2048, IH = 64, ID = 128;
  const std::int64_t max_batch = 64;
  Buf kv = filled(ctx, max_batch * 4096 * C, 0, 2.0f), pe = filled(ctx, max_batch * 4096 * rope, 0, 2.0f);
  const std::int64_t key_rows = max_batch * 4096;  // the indexer's key cache: 64 sequences of 4K
  Buf kcodes = filled(ctx, key_rows * ID, 1, 400.0f), kscale = filled(ctx, key_rows, 2, 1e-3f, 2e-3f);
  Buf q_lat = filled(ctx, max_batch * H * C, 0, 2.0f), q_pe = filled(ctx, max_batch * H * rope, 0, 2.0f);
  Buf out(max_batch * H * C * 2), sel(2048 * topk * 4), cnt(2048 * 4);
  Buf qcodes = filled(ctx, 2048 * IH * ID, 1, 400.0f), qscale = filled(ctx, 2048 * IH, 2, 1e-3f, 2e-3f);
  Buf hw = filled(ctx, 2048 * IH, 0, 1.0f);
  // selections: every sequence selects `topk` distinct positions of its 4K context
  {
    std::vector<std::int32_t> h(static_cast<std::size_t>(2048 * topk));
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<std::int32_t>((i % topk) * 2 % 4096);
    Mem::copy_from_host(sel.p, h.data(), h.size() * 4);
    std::vector<std::int32_t> c(2048, static_cast<std::int32_t>(topk));
    Mem::copy_from_host(cnt.p, c.data(), c.size() * 4);
  }
  const float scale = 0.07f;
  const std::int64_t nope = 128, v_dim = 128, dq = nope + rope, dkv = nope + v_dim;
  const Fp8Weight wkv_b = make_weight(ctx, H * dkv, C);  // absorb_query / project_values read it dequantized
  std::printf("\n%-34s %8s %8s %10s\n", "attention / indexer", "batch", "context", "ms");
  // decode at batch 1, 8, 64 and a 4K context, for the per-layer sums: latent attention, and the
  // absorbed query and value projections around it
  std::vector<double> attn_ms(3, 0.0), absorb_ms, idx_ms;
  for (const std::int64_t context : {1024, 4096, 16384}) {
    // each sequence selects min(top-k, context) positions spread over its context
    const std::int64_t k = std::min(topk, context);
    std::vector<std::int32_t> h(static_cast<std::size_t>(max_batch * topk), 0), c(max_batch, static_cast<std::int32_t>(k));
    for (std::int64_t b = 0; b < max_batch; ++b)
      for (std::int64_t j = 0; j < k; ++j) h[static_cast<std::size_t>(b * topk + j)] = static_cast<std::int32_t>(j * (context / k));
    Mem::copy_from_host(sel.p, h.data(), h.size() * 4);
    Mem::copy_from_host(cnt.p, c.data(), c.size() * 4);
    for (int bi = 0; bi < 3; ++bi) {
      const std::int64_t B = std::int64_t{1} << (3 * bi);  // 1, 8, 64
      if (B * context > max_batch * 4096) continue;        // the latent cache holds 64 x 4K rows
      const Paged pages(B, B, context, [](std::int64_t i) { return i; }, [&](std::int64_t) { return context - 1; });
      const double a = time_ms(ctx, reps, [&] {
        K::latent_attention(ctx, {q_lat.as<bf16>(), B * H, C, C}, {q_pe.as<bf16>(), B * H, rope, rope},
                            {kv.as<bf16>(), B * context, C, C}, {pe.as<bf16>(), B * context, rope, rope}, pages.view, H,
                            {sel.as<std::int32_t>(), B, topk, topk}, {cnt.as<std::int32_t>(), B}, scale,
                            {out.as<bf16>(), B * H, C, C});
      });
      std::printf("%-34s %8lld %8lld %10.4f\n", "latent attention (decode, top-2048)", static_cast<long long>(B),
                  static_cast<long long>(context), a);
      if (context == 4096) attn_ms[static_cast<std::size_t>(bi)] = a;
    }
  }
  {
    Buf qd = filled(ctx, max_batch * H * dq, 0, 2.0f), vals(max_batch * H * v_dim * 2);
    for (const std::int64_t B : {1, 8, 64}) {
      const double t = time_ms(ctx, reps, [&] {
        K::absorb_query(ctx, {qd.as<bf16>(), B * H, dq, dq}, wkv_b.view(), H, nope, v_dim, {q_lat.as<bf16>(), B * H, C, C});
        K::project_values(ctx, {out.as<bf16>(), B * H, C, C}, wkv_b.view(), H, nope, {vals.as<bf16>(), B * H, v_dim, v_dim});
      });
      std::printf("%-34s %8lld %8s %10.4f\n", "absorb_query + project_values", static_cast<long long>(B), "-", t);
      absorb_ms.push_back(t);
    }
  }
  for (const std::int64_t context : {1024, 4096, 16384}) {
    for (const std::int64_t B : {1, 8, 64}) {
      const std::int64_t rows = key_rows / B;
      if (context > rows) continue;  // the key cache holds 64 x 4K rows
      const Paged pages(B, B, rows, [](std::int64_t i) { return i; }, [&](std::int64_t) { return context - 1; });
      const double t = time_ms(ctx, reps, [&] {
        K::indexer_topk(ctx, {qcodes.as<std::uint8_t>(), B * IH, ID, ID}, {qscale.as<float>(), B * IH, 1, 1},
                        {hw.as<bf16>(), B, IH, IH}, 0.125f, 0.0884f, {kcodes.as<std::uint8_t>(), B * rows, ID, ID},
                        {kscale.as<float>(), B * rows, 1, 1}, pages.view, {sel.as<std::int32_t>(), B, topk, topk},
                        {cnt.as<std::int32_t>(), B});
      });
      std::printf("%-34s %8lld %8lld %10.4f\n", "indexer scores + top-2048 (decode)", static_cast<long long>(B),
                  static_cast<long long>(context), t);
      if (context == 4096) idx_ms.push_back(t);
    }
  }
  // prefill: one sequence of 2K tokens, causal selections (query s selects positions 0 .. min(top-k, s + 1) - 1)
  double prefill_attn = 0, prefill_idx = 0;
  {
    const std::int64_t S = 2048, v = v_dim, n = kLatentRows;
    const Paged pages(1, S, S, [](std::int64_t) { return 0; }, [](std::int64_t s) { return s; });
    Buf q = filled(ctx, S * H * dq, 0, 2.0f), kvx = filled(ctx, S * H * dkv, 0, 2.0f), o(S * H * v * 2);
    Buf ql(n * H * C * 2), ol(n * H * C * 2);
    {
      std::vector<std::int32_t> h(static_cast<std::size_t>(S * topk)), c(static_cast<std::size_t>(S));
      for (std::int64_t s = 0; s < S; ++s) {
        c[s] = static_cast<std::int32_t>(std::min(topk, s + 1));
        for (std::int64_t j = 0; j < c[s]; ++j) h[s * topk + j] = static_cast<std::int32_t>(j);
      }
      Mem::copy_from_host(sel.p, h.data(), h.size() * 4);
      Mem::copy_from_host(cnt.p, c.data(), c.size() * 4);
    }
    // the path a 2K prefill takes (past RuntimeOptions::absorbed_prefill_from, 1024 by default), as
    // layers/mla.hpp runs it: 256 queries at a time, all reading the sequence's cache rows
    prefill_attn = time_ms(ctx, std::min(reps, 3), [&] {
      for (std::int64_t t0 = 0; t0 < S; t0 += n) {
        const MatrixView<const bf16, Space> q_rows{q.as<bf16>() + t0 * H * dq, n * H, dq, dq};
        K::absorb_query(ctx, q_rows, wkv_b.view(), H, nope, v, {ql.as<bf16>(), n * H, C, C});
        K::latent_attention(ctx, {ql.as<bf16>(), n * H, C, C}, {q.as<bf16>() + t0 * H * dq + nope, n * H, rope, dq},
                            {kv.as<bf16>(), S, C, C}, {pe.as<bf16>(), S, rope, rope}, pages.view.rows(t0, n), H,
                            {sel.as<std::int32_t>() + t0 * topk, n, topk, topk}, {cnt.as<std::int32_t>() + t0, n}, scale,
                            {ol.as<bf16>(), n * H, C, C});
        K::project_values(ctx, {ol.as<bf16>(), n * H, C, C}, wkv_b.view(), H, nope, {o.as<bf16>() + t0 * H * v, n * H, v, v});
      }
    });
    // the expanded path of shorter prefills (wkv_b's keys and values per position, then sparse_attention)
    const double expanded = time_ms(ctx, std::min(reps, 3), [&] {
      K::sparse_attention(ctx, {q.as<bf16>(), S, H * dq, H * dq}, {kvx.as<bf16>(), S, H * dkv, H * dkv},
                          {pe.as<bf16>(), S, rope, rope}, H, nope, v, {sel.as<std::int32_t>(), S, topk, topk},
                          {cnt.as<std::int32_t>(), S}, scale, {o.as<bf16>(), S, H * v, H * v});
    });
    prefill_idx = time_ms(ctx, std::min(reps, 3), [&] {
      K::indexer_topk(ctx, {qcodes.as<std::uint8_t>(), S * IH, ID, ID}, {qscale.as<float>(), S * IH, 1, 1},
                      {hw.as<bf16>(), S, IH, IH}, 0.125f, 0.0884f, {kcodes.as<std::uint8_t>(), S, ID, ID},
                      {kscale.as<float>(), S, 1, 1}, pages.view, {sel.as<std::int32_t>(), S, topk, topk},
                      {cnt.as<std::int32_t>(), S});
    });
    std::printf("%-34s %8d %8d %10.4f\n", "absorbed attention (prefill)", 1, 2048, prefill_attn);
    std::printf("%-34s %8d %8d %10.4f\n", "sparse attention (expanded prefill)", 1, 2048, expanded);
    std::printf("%-34s %8d %8d %10.4f\n", "indexer scores + top-2048 (prefill)", 1, 2048, prefill_idx);
  }

  // ------------------------------------------------------------------ 4. routed experts, grouped
  // 256 local experts (world size 1) of w1, w3 [2048, 7168] and w2 [7168, 2048]; every token picks 8
  // distinct experts at random; timed: moe_plan and the grouped call (no host read, no synchronization)
  std::vector<double> expert_ms;
  double expert_prefill = 0;
  {
    const std::int64_t E = 256, k = 8, dim = 7168, inter = 2048, Tmax = 2048, R = Tmax * k;
    std::vector<Fp8Weight> ew;
    ew.reserve(static_cast<std::size_t>(3 * E));
    std::vector<ExpertPointers> table(static_cast<std::size_t>(E));
    for (auto& t : table) {
      ew.push_back(make_weight(ctx, inter, dim));
      ew.push_back(make_weight(ctx, inter, dim));
      ew.push_back(make_weight(ctx, dim, inter));
      const auto& w1 = ew[ew.size() - 3];
      const auto& w3 = ew[ew.size() - 2];
      const auto& w2 = ew[ew.size() - 1];
      t = {w1.codes.p, w1.scales.as<float>(), w3.codes.p, w3.scales.as<float>(), w2.codes.p, w2.scales.as<float>()};
    }
    Buf dtable(table.size() * sizeof(ExpertPointers));
    Mem::copy_from_host(dtable.p, table.data(), dtable.bytes);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(E)), chosen(static_cast<std::size_t>(R));
    for (std::int64_t e = 0; e < E; ++e) ids[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(e);
    std::uint32_t state = 12345;
    for (std::int64_t t = 0; t < Tmax; ++t) {  // a partial Fisher-Yates shuffle per token
      for (std::int64_t j = 0; j < k; ++j) {
        state = state * 1664525u + 1013904223u;
        std::swap(ids[static_cast<std::size_t>(j)], ids[static_cast<std::size_t>(j + state % (E - j))]);
        chosen[static_cast<std::size_t>(t * k + j)] = ids[static_cast<std::size_t>(j)];
      }
    }
    Buf experts(R * 4), weights = filled(ctx, R, 2, 0.1f, 1.0f), rows(R * 4), row_weights(R * 4), offsets((E + 1) * 4);
    Mem::copy_from_host(experts.p, chosen.data(), chosen.size() * 4);
    Buf xc(Tmax * dim), xsc(Tmax * dim / 128 * 4), hidden(R * inter * 2), hc(R * inter), hs(R * inter / 128 * 4);
    Buf eo(R * dim * 2), tiles((E + 1) * 4), order(R * 4), sum(Tmax * dim * 4);
    ExpertGroupScratch<Space> g;
    g.x_codes = {xc.as<std::uint8_t>(), Tmax, dim, dim};
    g.x_scales = {xsc.as<float>(), Tmax, dim / 128, dim / 128};
    g.hidden = {hidden.as<bf16>(), R, inter, inter};
    g.h_codes = {hc.as<std::uint8_t>(), R, inter, inter};
    g.h_scales = {hs.as<float>(), R, inter / 128, inter / 128};
    g.out = {eo.as<bf16>(), R, dim, dim};
    g.tiles = {tiles.as<std::int32_t>(), E + 1};
    g.order = {order.as<std::int32_t>(), R};
    const ExpertGroupView<Space> group{dtable.as<ExpertPointers>(), E, DType::F8_E4M3, dim, inter, ScaleFmt::ue8m0};
    auto run = [&](std::int64_t T) {
      K::moe_plan(ctx, {experts.as<std::int32_t>(), T, k, k}, {weights.as<float>(), T, k, k}, 0,
                  {rows.as<std::int32_t>(), T * k}, {row_weights.as<float>(), T * k}, {offsets.as<std::int32_t>(), E + 1});
      K::expert_mlp_grouped(ctx, {x.as<bf16>(), T, dim, dim}, {experts.as<std::int32_t>(), T, k, k}, 0, group,
                            {rows.as<std::int32_t>(), T * k}, {row_weights.as<float>(), T * k},
                            {offsets.as<std::int32_t>(), E + 1}, g, {sum.as<float>(), T, dim, dim});
    };
    std::printf("\n%-34s %8s %10s\n", "routed experts (grouped, FP8)", "tokens", "ms");
    for (const std::int64_t T : {1, 8, 64}) {
      expert_ms.push_back(time_ms(ctx, reps, [&] { run(T); }));
      std::printf("%-34s %8lld %10.4f\n", "moe_plan + expert_mlp_grouped", static_cast<long long>(T), expert_ms.back());
    }
    expert_prefill = time_ms(ctx, std::min(reps, 3), [&] { run(Tmax); });
    std::printf("%-34s %8lld %10.4f\n", "moe_plan + expert_mlp_grouped", static_cast<long long>(Tmax), expert_prefill);
  }

  // ------------------------------------------------------------------ 5. per layer
  // GEMM rows: attention GEMMs 0..5, dense MLP 6..7, expert MLP 8..9. A decode step of batch B runs the
  // attention GEMMs at M = B; a dense layer its MLP at M = B; a MoE layer one shared expert at M = B and
  // the routed experts as one grouped call (section 4).
  const double fp8_attn_bytes = 1536.0 * 7168 + 24576.0 * 1536 + 576.0 * 7168 + 7168.0 * 16384 + 8192.0 * 1536 + 128.0 * 7168;
  const double dense_mlp_bytes = 3.0 * 18432 * 7168, expert_bytes = 3.0 * 2048 * 7168;
  std::printf("\n%-10s %-8s %8s | %10s %12s %10s %8s\n", "layer", "phase", "batch", "ms", "bytes read", "GB/s",
              "of peak");
  for (int bi = 0; bi < 3; ++bi) {
    const std::int64_t B = std::int64_t{1} << (3 * bi);  // 1, 8, 64
    const int mi = bi;                                   // Ms index of M = B
    const double attn = gemm_sum(0, 6, mi) + attn_ms[static_cast<std::size_t>(bi)] +
                        absorb_ms[static_cast<std::size_t>(bi)] + idx_ms[static_cast<std::size_t>(bi)];
    const double cache_bytes = static_cast<double>(B) * topk * (C + rope) * 2 + static_cast<double>(B) * 4096 * (ID + 4);
    const double dense_ms = attn + gemm_sum(6, 8, mi);
    const std::int64_t experts = std::min<std::int64_t>(8 * B, 256);
    const double moe_ms = attn + gemm_sum(8, 10, mi) + expert_ms[static_cast<std::size_t>(bi)];
    const double dense_bytes = fp8_attn_bytes + dense_mlp_bytes + cache_bytes;
    const double moe_bytes = fp8_attn_bytes + (1 + experts) * expert_bytes + cache_bytes;
    std::printf("%-10s %-8s %8lld | %10.3f %12.3e %10.0f %7.0f%%\n", "dense", "decode", static_cast<long long>(B), dense_ms,
                dense_bytes, dense_bytes / (dense_ms * 1e-3) / 1e9, 100.0 * dense_bytes / (dense_ms * 1e-3) / 1e9 / bandwidth);
    std::printf("%-10s %-8s %8lld | %10.3f %12.3e %10.0f %7.0f%%\n", "moe", "decode", static_cast<long long>(B), moe_ms,
                moe_bytes, moe_bytes / (moe_ms * 1e-3) / 1e9, 100.0 * moe_bytes / (moe_ms * 1e-3) / 1e9 / bandwidth);
  }
  const double prefill_common = gemm_sum(0, 6, 3) + prefill_attn + prefill_idx;
  std::printf("%-10s %-8s %8d | %10.3f\n", "dense", "prefill", 2048, prefill_common + gemm_sum(6, 8, 3));
  std::printf("%-10s %-8s %8d | %10.3f\n", "moe", "prefill", 2048, prefill_common + gemm_sum(8, 10, 3) + expert_prefill);
  std::printf("\nPer-layer figures sum the timed medians of: the attention GEMMs (wq_a, wq_b, wkv_a, wo, the indexer's wq_b\n"
              "and wk), the indexer's scores and top-k, the attention (decode: absorb_query, latent_attention at a 4K\n"
              "context, project_values; prefill: the absorbed path of a 2K prefill), and the dense MLP's GEMMs or the\n"
              "shared expert's GEMMs plus the grouped routed experts (with moe_plan). They exclude: RMSNorm and the\n"
              "fused residual, RoPE, the KV and indexer cache writes, the indexer's LayerNorm, Hadamard transforms\n"
              "and query/key quantization, the gate's f32 GEMM and routing, the dense/shared MLP's SwiGLU, the\n"
              "expert sum's rounding, launch gaps between kernels, and (world size > 1) the all-reduces.\n");
  return 0;
}
