/// \file
/// \brief ThreadCommunicator: an in-process Communicator for model-parallel ranks that run as threads
///        of one process (tests, and embedders that split a model over the cores or memory of one host).
///
/// \code
/// auto comms = dsv32::ThreadCommunicator::group(2);          // one handle per rank
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
/// values in rank order 0, 1, ..., world - 1, the same on every rank and from run to run.
///
/// A rank that fails (throws) between collectives would leave the others waiting forever; call
/// abort() on any handle of the group (e.g. from the failing thread's catch block) and every
/// pending and future collective of the group throws Error(state) instead.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "dsv32/core/error.hpp"
#include "dsv32/core/parallel.hpp"

namespace dsv32 {

/// \addtogroup core
/// @{

/// \brief One rank's handle on a group of threads that exchange data through shared memory.
///
/// Create the handles of a group with group(world); hand handle r to the thread running rank r
/// (Parallel::from(handle)). Handles are cheap to copy and share the group's state; the state lives
/// until the last handle is destroyed. One handle must be used by one thread at a time.
class ThreadCommunicator : public Communicator {
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

  /// \brief Element-wise sum of every rank's `data[0, n)`, written to every rank's `data`.
  ///
  /// Each rank sums one contiguous chunk of the elements over all ranks (in rank order) and writes
  /// that chunk into every rank's buffer, so the work is spread and every rank gets bit-identical
  /// results. Three barriers: buffers published, chunks summed, results written.
  /// \throws Error(invalid_argument) on every rank if the ranks pass different n;
  ///         Error(state) if the group was aborted.
  void all_reduce_sum(float* data, std::size_t n) override {
    State& s = *state_;
    const int world = s.world;
    s.buffers[static_cast<std::size_t>(rank_)] = data;
    s.sizes[static_cast<std::size_t>(rank_)] = n;
    s.wait("all_reduce_sum");
    check_sizes("all_reduce_sum", n);
    const std::size_t chunk = (n + static_cast<std::size_t>(world) - 1) / static_cast<std::size_t>(world);
    const std::size_t lo = std::min(n, chunk * static_cast<std::size_t>(rank_)), hi = std::min(n, lo + chunk);
    std::vector<float> sum(hi - lo, 0.0f);
    for (int r = 0; r < world; ++r) {
      const float* src = static_cast<const float*>(s.buffers[static_cast<std::size_t>(r)]);
      for (std::size_t i = lo; i < hi; ++i) sum[i - lo] += src[i];
    }
    s.wait("all_reduce_sum");  // every chunk is summed: nobody reads the inputs any more
    for (int r = 0; r < world; ++r)
      std::copy(sum.begin(), sum.end(), static_cast<float*>(s.buffers[static_cast<std::size_t>(r)]) + lo);
    s.wait("all_reduce_sum");  // every chunk is written everywhere
  }

  /// \brief Concatenates every rank's `local[0, n)` in rank order into this rank's `out[0, world * n)`.
  /// \throws Error(invalid_argument) on every rank if the ranks pass different n;
  ///         Error(state) if the group was aborted.
  void all_gather(const float* local, std::size_t n, float* out) override {
    State& s = *state_;
    s.buffers[static_cast<std::size_t>(rank_)] = const_cast<float*>(local);
    s.sizes[static_cast<std::size_t>(rank_)] = n;
    s.wait("all_gather");
    check_sizes("all_gather", n);
    for (int r = 0; r < s.world; ++r) {
      const float* src = static_cast<const float*>(s.buffers[static_cast<std::size_t>(r)]);
      std::copy(src, src + n, out + static_cast<std::size_t>(r) * n);
    }
    s.wait("all_gather");  // nobody reads `local` any more: the caller may reuse it
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
    std::vector<void*> buffers;       // per rank: the buffer of the collective in progress
    std::vector<std::size_t> sizes;   // per rank: its element count
    mutable std::mutex mutex;
    std::condition_variable cv;
    int arrived = 0;
    std::uint64_t generation = 0;
    bool aborted = false;
  };

  ThreadCommunicator(std::shared_ptr<State> s, int rank) : state_(std::move(s)), rank_(rank) {}

  // Every rank sees the same sizes after the first barrier, so every rank throws alike (and none
  // is left waiting at the next barrier).
  void check_sizes(const char* op, std::size_t n) const {
    for (int r = 0; r < state_->world; ++r)
      DSV32_CHECK(state_->sizes[static_cast<std::size_t>(r)] == n, invalid_argument, "ThreadCommunicator: ", op,
                  ": rank ", rank_, " passed ", n, " elements but rank ", r, " passed ",
                  state_->sizes[static_cast<std::size_t>(r)]);
  }

  std::shared_ptr<State> state_;
  int rank_ = 0;
};

/// @}

}  // namespace dsv32
