// dsv32-bench-mpi: a decode step of a slice of the 671B model at world size 1 and at the world size of
// mpirun, over MPI: the step time, the time spent in collectives and the bytes each rank sends per
// token, per layer and in all, medians over the steps.
//
//   mpirun -n 2 --oversubscribe -x OMP_NUM_THREADS=1 build/bench/dsv32-bench-mpi [steps]
//
// The slice: the 671B model's every shape (dim 7168, 128 heads, q/kv ranks 1536/512, dense inter
// 18432, expert inter 2048, 8 of the experts per token plus the shared one, the indexer's 64 heads,
// the 129280-token vocabulary) with 2 layers — one dense, one MoE — and 32 routed experts instead of
// 256 (a decode step reads only the 8 chosen ones, so its time and traffic are the 671B model's per
// layer; memory is not). Synthetic weights (fill_weights(): a random table repeated, in the
// checkpoint's dtypes — init_random's normal draws would take minutes at this size; the timing does
// not depend on the values). Rank 0 first runs the one-rank model alone (the other
// ranks sleep), then every rank runs its part of the split model. The context: a 64-token prefill,
// then `steps` decode steps (default 8) of one sequence.
#include <dsv32/mpi.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"

namespace {

using Slice671B = dsv32::Slice671BFp8;  // the 671B slice (2 layers, 32 routed experts)

constexpr std::int64_t kPrefill = 64;

// Waits for every rank without spinning (MPI's blocking barrier polls, which would steal the core of
// the rank being timed).
void quiet_barrier(MPI_Comm comm) {
  MPI_Request request;
  DSV32_MPI_CHECK(MPI_Ibarrier(comm, &request));
  for (int done = 0; !done;) {
    DSV32_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Writes every parameter from a table of random values of its dtype, repeated with a period prime to
// every row length and offset per tensor (so that rows, heads and experts differ): FP8 codes of
// magnitude <= 1 with scales of 1/64, bf16 weights ~ N(0, 1/in), norms 1, biases and gate bias 0.
template <class Model>
void fill_weights(Model& model) {
  constexpr std::size_t kPeriod = 65521;  // prime
  std::mt19937 gen(7);
  std::vector<std::uint8_t> fp8(kPeriod);
  std::vector<float> normal(kPeriod);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  for (std::size_t i = 0; i < kPeriod; ++i) {
    normal[i] = n01(gen);
    fp8[i] = static_cast<std::uint8_t>((gen() % 0x38) | (gen() & 0x80));  // |code| < 0x38: |value| < 1
  }
  std::size_t offset = 0;
  model.load_weights([](const auto&, std::shared_ptr<const void>&) -> const void* { return nullptr; },
                     [&](const dsv32::Parameter<dsv32::Cpu>& p, dsv32::WeightUploader<dsv32::Cpu>&, void* dst) {
                       const auto count = static_cast<std::size_t>(p.numel());
                       offset = (offset + 7919) % kPeriod;
                       const float sd = 1.0f / std::sqrt(static_cast<float>(p.shape()[p.shape().rank() - 1]));
                       if (p.dtype() == dsv32::DType::F8_E4M3) {
                         auto* out = static_cast<std::uint8_t*>(dst);
                         for (std::size_t i = 0; i < count; ++i) out[i] = fp8[(offset + i) % kPeriod];
                       } else if (p.dtype() == dsv32::DType::BF16) {
                         auto* out = static_cast<dsv32::bf16*>(dst);
                         for (std::size_t i = 0; i < count; ++i) out[i] = dsv32::bf16(sd * normal[(offset + i) % kPeriod]);
                       } else {
                         const float value = p.role() == dsv32::TensorRole::norm    ? 1.0f
                                             : p.role() == dsv32::TensorRole::scale ? 1.0f / 64
                                                                                    : 0.0f;
                         std::fill_n(static_cast<float*>(dst), count, value);
                       }
                     });
}

struct Result {
  double fill_s = 0, step_ms = 0, collective_ms = 0;
  double bytes_per_token = 0;
  double weights = 0;
};

// A prefill, then timed decode steps; the communicator's stats over those steps.
Result run(const dsv32::Parallel& parallel, dsv32::MpiCommunicator<>* comm, int steps) {
  dsv32::RuntimeOptions o;
  o.max_batch_size = 1;
  o.max_seq_len = kPrefill + steps + 8;
  Result r;
  const auto t0 = std::chrono::steady_clock::now();
  dsv32::Transformer<Slice671B> model(o, parallel);
  fill_weights(model);
  r.fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.weights = static_cast<double>(model.memory_plan().weights);
  std::vector<std::int32_t> prompt(kPrefill);
  for (std::int64_t i = 0; i < kPrefill; ++i) prompt[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 7919) % 129280);
  model.forward(prompt, 1, 0);
  std::int64_t pos = kPrefill;
  std::vector<double> step, in_collectives;
  std::uint64_t bytes = 0;
  for (int s = 0; s < steps; ++s) {
    const std::int32_t token = static_cast<std::int32_t>((pos * 31) % 129280);
    if (comm) comm->reset_stats();
    const auto a = std::chrono::steady_clock::now();
    model.forward(std::span<const std::int32_t>(&token, 1), 1, pos++);
    step.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
    if (comm) {
      in_collectives.push_back(comm->stats().seconds * 1e3);
      bytes = comm->stats().bytes_sent;  // the same every step
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  r.step_ms = median(step);
  r.collective_ms = median(in_collectives);
  r.bytes_per_token = static_cast<double>(bytes);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  dsv32::MpiSession session(argc, argv);
  dsv32::MpiCommunicator<> comm;
  const int steps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 8;
  const int world = comm.world_size(), rank = comm.rank();
  const char* threads = std::getenv("OMP_NUM_THREADS");
  try {
    Result one;
    if (rank == 0) {
      std::printf("model %s, batch 1, decode at position %lld, %d steps, %d rank(s), OMP_NUM_THREADS=%s\n",
                  std::string(Slice671B::name).c_str(), static_cast<long long>(kPrefill), steps, world,
                  threads ? threads : "(unset)");
      one = run(dsv32::Parallel{}, nullptr, steps);
    }
    quiet_barrier(comm.handle());
    if (world == 1) {
      std::printf("W = 1: step %.1f ms (weights %s, weights filled in %.1f s)\n", one.step_ms,
                  dsv32::format_bytes(one.weights).c_str(), one.fill_s);
      return 0;
    }
    const Result split = run(dsv32::Parallel::from(comm), &comm, steps);
    // Every rank sends the same bytes; the step and collective times are rank 0's.
    if (rank == 0) {
      constexpr double dim = Slice671B::dim, vocab = Slice671B::vocab_size;
      const double w = world, share = 2.0 * (w - 1) / w;  // reduce-scatter + all-gather
      const double per_layer = 2 * share * dim * 4;          // wo's and the FFN's f32 all-reduce of [1, dim]
      const double embedding = share * dim * 2;              // the embedding's bf16 all-reduce
      const double head = (w - 1) * vocab / w * 4;           // the head's f32 logits, all-gathered
      std::printf("%-8s %12s %16s %12s %28s %14s\n", "", "step (ms)", "collectives (ms)", "compute (ms)",
                  "bytes sent/rank/token", "weights/rank");
      std::printf("%-8s %12.1f %16s %12.1f %28s %14s\n", "W = 1", one.step_ms, "-", one.step_ms, "-",
                  dsv32::format_bytes(one.weights).c_str());
      std::printf("W = %-4d %12.1f %16.2f %12.1f %28.0f %14s\n", world, split.step_ms, split.collective_ms,
                  split.step_ms - split.collective_ms, split.bytes_per_token, dsv32::format_bytes(split.weights).c_str());
      std::printf("bytes each rank sends per token: %.0f per layer (2 f32 all-reduces of %g), %.0f for the embedding "
                  "(bf16 all-reduce), %.0f for the head (all-gather of %g/%d logits); %d layers: %.0f expected, %.0f "
                  "measured\n",
                  per_layer, dim, embedding, head, vocab, world, static_cast<int>(Slice671B::n_layers),
                  per_layer * Slice671B::n_layers + embedding + head, split.bytes_per_token);
      std::printf("the 671B model (61 layers) at W = %d: %.2f MB per token per rank\n", world,
                  (per_layer * 61 + embedding + head) / 1e6);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsv32-bench-mpi: rank %d: %s\n", rank, e.what());
    dsv32::MpiSession::abort(1);
  }
  return 0;
}
