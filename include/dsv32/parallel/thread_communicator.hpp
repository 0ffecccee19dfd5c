/// \file
/// \brief ThreadCommunicator: an in-process Communicator for model-parallel ranks that run as threads
///        of one process (tests, and embedders that split a model over the cores or memory of one host).
///
/// \code
/// auto comms = dsv32::ThreadCommunicator<dsv32::Cpu>::group(2);   // one handle per rank
/// std::vector<std::thread> threads;
/// for (int r = 0; r < 2; ++r)
///   threads.emplace_back([&, r] {
///     dsv32::Transformer<MyConfig> model(options, dsv32::Parallel::from(comms[r]));
///     dsv32::load_checkpoint(model, "converted-mp2");      // model{r}-mp2.safetensors
///     auto logits = model.forward(tokens, batch, 0);        // every rank makes the same calls
///   });
/// \endcode
///
/// Collectives are synchronous: every rank of the group must make the same sequence of calls with
/// the same sizes (as with NCCL or MPI). Results are deterministic: all_reduce_sum adds the ranks'
/// values in rank order 0, 1, ..., world - 1 in f32, the same on every rank and from run to run.
///
/// The ranks exchange host buffers. On a backend whose memory the host can read (Cpu) those are the
/// callers' own buffers; on any other backend each rank stages its buffer through host memory (one
/// copy down and one up per collective, each followed by a synchronization of the rank's context).
///
/// A rank that fails (throws) between collectives would leave the others waiting forever; call
/// abort() on any handle of the group (e.g. from the failing thread's catch block) and every
/// pending and future collective of the group throws Error(state) instead.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/cpu/memory.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/core/parallel.hpp"
#include "dsv32/parallel/host_staging.hpp"

namespace dsv32 {

/// \addtogroup core
/// @{

/// \brief One rank's handle on a group of threads that exchange data through shared memory.
///
/// Create the handles of a group with group(world); hand handle r to the thread running rank r
/// (Parallel::from(handle)). Handles are cheap to copy and share the group's state; the state lives
/// until the last handle is destroyed. One handle must be used by one thread at a time.
/// \tparam Backend the backend of the models whose ranks it connects
template <class Backend = Cpu>
class ThreadCommunicator : public Communicator<Backend> {
  using space = space_of<Backend>;

 public:
  /// \brief The `world` handles of a new group, handle r being rank r.
  /// \throws Error(invalid_argument) unless world >= 1.
  static std::vector<ThreadCommunicator> group(int world) {
    DSV32_CHECK(world >= 1, invalid_argument, "ThreadCommunicator: world size must be >= 1, got ", world);
    auto state = std::make_shared<State>(world);
    std::vector<ThreadCommunicator> out;
    out.reserve(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) out.push_back(ThreadCommunicator(state, r));
    return out;
  }

  int world_size() const override { return state_->world; }
  int rank() const override { return rank_; }

  /// \brief Element-wise sum of every rank's `data`, written to every rank's `data`.
  ///
  /// Each rank sums one contiguous chunk of the elements over all ranks (in rank order) and writes
  /// that chunk into every rank's buffer, so the work is spread and every rank gets bit-identical
  /// results. Three barriers: buffers published, chunks summed, results written.
  /// \throws Error(invalid_argument) on every rank if the ranks pass different sizes;
  ///         Error(state) if the group was aborted.
  void all_reduce_sum(ExecutionContext<Backend>& ctx, VectorView<float, space> data) override {
    float* host = staging_.down(ctx, data.data, data.size);
    reduce_host(host, static_cast<std::size_t>(data.size));
    staging_.up(ctx, data.data, host, data.size);
  }
  /// \brief The bf16 sum: every rank's values widened to f32, summed as the f32 overload does, then
  ///        rounded to bf16 once.
  void all_reduce_sum(ExecutionContext<Backend>& ctx, VectorView<bf16, space> data) override {
    const std::size_t n = static_cast<std::size_t>(data.size);
    wide_.resize(n);
    bf16* narrow = staging_.down(ctx, data.data, data.size);
    for (std::size_t i = 0; i < n; ++i) wide_[i] = static_cast<float>(narrow[i]);
    reduce_host(wide_.data(), n);
    for (std::size_t i = 0; i < n; ++i) narrow[i] = bf16(wide_[i]);
    staging_.up(ctx, data.data, narrow, data.size);
  }
  /// \brief Concatenates every rank's `local` in rank order into this rank's `out`.
  /// \throws Error(invalid_argument) on every rank if the ranks pass different sizes or `out` is not
  ///         world_size() times `local`; Error(state) if the group was aborted.
  void all_gather(ExecutionContext<Backend>& ctx, VectorView<const float, space> local,
                  VectorView<float, space> out) override {
    const std::size_t n = static_cast<std::size_t>(local.size);
    DSV32_CHECK(out.size == local.size * state_->world, invalid_argument, "ThreadCommunicator: all_gather of ",
                local.size, " elements per rank needs an output of ", local.size * state_->world, ", got ", out.size);
    const float* mine = staging_.down(ctx, const_cast<float*>(local.data), local.size);
    float* dst = staging_.out(out.data, out.size);
    State& s = *state_;
    publish(const_cast<float*>(mine), n, "all_gather");
    for (int r = 0; r < s.world; ++r) {
      const float* src = static_cast<const float*>(s.buffers[static_cast<std::size_t>(r)]);
      std::copy(src, src + n, dst + static_cast<std::size_t>(r) * n);
    }
    s.wait("all_gather");  // nobody reads `local` any more: the caller may reuse it
    staging_.up(ctx, out.data, dst, out.size);
  }
  /// \brief Copies rank `root`'s `data` into every rank's `data`.
  /// \throws Error(invalid_argument) for a root outside the group or different sizes; Error(state) if
  ///         the group was aborted.
  void broadcast(ExecutionContext<Backend>& ctx, VectorView<std::byte, space> data, int root) override {
    DSV32_CHECK(root >= 0 && root < state_->world, invalid_argument, "ThreadCommunicator: broadcast root ", root,
                " outside [0, ", state_->world, ")");
    std::byte* host = staging_.down(ctx, data.data, data.size);
    broadcast_bytes(host, static_cast<std::size_t>(data.size), root, "broadcast");
    staging_.up(ctx, data.data, host, data.size);
  }

  /// \brief Copies rank `root`'s host bytes into every rank's `data`.
  /// \throws as broadcast().
  void broadcast_host(std::span<std::byte> data, int root) override {
    DSV32_CHECK(root >= 0 && root < state_->world, invalid_argument, "ThreadCommunicator: broadcast_host root ", root,
                " outside [0, ", state_->world, ")");
    broadcast_bytes(data.data(), data.size(), root, "broadcast_host");
  }
  /// \brief The minimum of every rank's `value`, on every rank.
  /// \throws Error(state) if the group was aborted.
  std::int64_t all_reduce_min_host(std::int64_t value) override {
    State& s = *state_;
    publish(&value, 1, "all_reduce_min_host");
    std::int64_t m = value;
    for (int r = 0; r < s.world; ++r) m = std::min(m, *static_cast<const std::int64_t*>(s.buffers[static_cast<std::size_t>(r)]));
    s.wait("all_reduce_min_host");  // nobody reads `value` any more
    return m;
  }

  /// \brief Makes every pending and future collective of the group throw Error(state), so that the
  ///        other ranks of a failed rank do not wait forever. Irreversible.
  void abort() noexcept { state_->abort(); }
  /// \brief Whether abort() was called on any handle of the group.
  bool aborted() const noexcept {
    std::lock_guard lock(state_->mutex);
    return state_->aborted;
  }

 private:
  // What the ranks share: the buffers of the collective in progress and a reusable barrier.
  struct State {
    explicit State(int w) : world(w), buffers(static_cast<std::size_t>(w)), sizes(static_cast<std::size_t>(w)) {}

    // Blocks until all ranks arrive (or the group is aborted).
    void wait(const char* op) {
      std::unique_lock lock(mutex);
      DSV32_CHECK(!aborted, state, "ThreadCommunicator: ", op, " on an aborted group");
      const std::uint64_t gen = generation;
      if (++arrived == world) {
        arrived = 0;
        ++generation;
        cv.notify_all();
        return;
      }
      cv.wait(lock, [&] { return generation != gen || aborted; });
      DSV32_CHECK(generation != gen, state, "ThreadCommunicator: ", op, " interrupted: the group was aborted");
    }
    void abort() noexcept {
      {
        std::lock_guard lock(mutex);
        aborted = true;
      }
      cv.notify_all();
    }

    const int world;
    std::vector<void*> buffers;       // per rank: the host buffer of the collective in progress
    std::vector<std::size_t> sizes;   // per rank: its element count
    mutable std::mutex mutex;
    std::condition_variable cv;
    int arrived = 0;
    std::uint64_t generation = 0;
    bool aborted = false;
  };

  ThreadCommunicator(std::shared_ptr<State> s, int rank) : state_(std::move(s)), rank_(rank) {}

  // Publishes this rank's host buffer and size, waits for all, and checks that the sizes agree (every
  // rank sees the same sizes after the barrier, so every rank throws alike and none is left waiting).
  void publish(void* host, std::size_t n, const char* op) {
    State& s = *state_;
    s.buffers[static_cast<std::size_t>(rank_)] = host;
    s.sizes[static_cast<std::size_t>(rank_)] = n;
    s.wait(op);
    for (int r = 0; r < s.world; ++r)
      DSV32_CHECK(s.sizes[static_cast<std::size_t>(r)] == n, invalid_argument, "ThreadCommunicator: ", op, ": rank ",
                  rank_, " passed ", n, " elements but rank ", r, " passed ", s.sizes[static_cast<std::size_t>(r)]);
  }

  // Copies the root's host buffer into every rank's.
  void broadcast_bytes(std::byte* host, std::size_t n, int root, const char* op) {
    State& s = *state_;
    publish(host, n, op);
    if (rank_ != root) {
      const auto* src = static_cast<const std::byte*>(s.buffers[static_cast<std::size_t>(root)]);
      std::copy(src, src + n, host);
    }
    s.wait(op);  // the root's buffer is no longer read
  }

  // The f32 sum over the ranks' host buffers, in rank order, chunk by chunk.
  void reduce_host(float* data, std::size_t n) {
    State& s = *state_;
    const std::size_t world = static_cast<std::size_t>(s.world);
    publish(data, n, "all_reduce_sum");
    const std::size_t chunk = (n + world - 1) / world;
    const std::size_t lo = std::min(n, chunk * static_cast<std::size_t>(rank_)), hi = std::min(n, lo + chunk);
    std::vector<float> sum(hi - lo, 0.0f);
    for (std::size_t r = 0; r < world; ++r) {
      const float* src = static_cast<const float*>(s.buffers[r]);
      for (std::size_t i = lo; i < hi; ++i) sum[i - lo] += src[i];
    }
    s.wait("all_reduce_sum");  // every chunk is summed: nobody reads the inputs any more
    for (std::size_t r = 0; r < world; ++r) std::copy(sum.begin(), sum.end(), static_cast<float*>(s.buffers[r]) + lo);
    s.wait("all_reduce_sum");  // every chunk is written everywhere
  }

  std::shared_ptr<State> state_;
  int rank_ = 0;
  detail::HostStaging<Backend> staging_;  // host copies of backend buffers (non-host-visible backends)
  std::vector<float> wide_;
};

/// @}

}  // namespace dsv32
