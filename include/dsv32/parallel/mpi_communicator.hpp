/// \file
/// \brief MpiCommunicator: model parallelism across processes and hosts over MPI (one rank per
///        process), and MpiSession, which initializes and finalizes MPI.
///
/// \code
/// int main(int argc, char** argv) {
///   dsv32::MpiSession mpi(argc, argv);                  // MPI_Init_thread, MPI_Finalize at exit
///   dsv32::MpiCommunicator<> comm;                      // MPI_COMM_WORLD's ranks
///   dsv32::Transformer<MyConfig> model(options, dsv32::Parallel::from(comm));
///   dsv32::run_collectively(&comm, "loading", [&] { dsv32::load_checkpoint(model, dir); });
///   auto logits = model.forward(tokens, batch, 0);      // every rank makes the same calls
/// }
/// \endcode
/// Run with `mpirun -n W program ...`; docs/parallelism.md says what each rank needs on disk and how
/// to run over several hosts.
///
/// Results are those of ThreadCommunicator bit for bit: all_reduce_sum adds the ranks' values in rank
/// order 0, 1, ..., W - 1 in f32 starting from +0 (bf16 values widened first, the sum rounded to bf16
/// once), the same on every rank. MPI's own MPI_SUM is not used: MPI does not fix the order of a
/// reduction, and its results may differ by rank and by run. Instead each all-reduce is a
/// reduce-scatter (MPI_Alltoallv: rank r receives every rank's r-th chunk and sums it in rank order)
/// followed by an all-gather of the summed chunks (MPI_Allgatherv): each rank sends 2 (W - 1) / W of the
/// buffer, as a ring all-reduce does, and bf16 buffers travel as bf16.
///
/// Every MPI call's status is checked (the communicator's error handler is MPI_ERRORS_RETURN); a
/// failure throws Error(io) naming the call and MPI's message. The ranks must make the same calls with
/// the same sizes (as with MPI itself); unlike ThreadCommunicator, sizes are not compared between ranks.
#pragma once

// MPI's C API only: the deprecated C++ bindings (which Open MPI's mpi.h would otherwise pull in) are
// not used and do not compile warning-free.
#ifndef OMPI_SKIP_MPICXX
/// \brief Open MPI: mpi.h without the C++ bindings.
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
/// \brief MPICH: mpi.h without the C++ bindings.
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/cpu/memory.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/parallel.hpp"
#include "dsv32/parallel/host_staging.hpp"

namespace dsv32 {

/// \addtogroup core
/// @{

namespace detail {
/// Throws Error(io) naming the MPI call `call` unless `code` is MPI_SUCCESS.
inline void mpi_check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  fail(ErrorKind::io, call, " failed: ", length > 0 ? std::string(text, static_cast<std::size_t>(length)) : "?",
       " (MPI error code ", code, ")");
}
inline bool mpi_initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}
inline bool mpi_finalized() {
  int flag = 0;
  MPI_Finalized(&flag);
  return flag != 0;
}
}  // namespace detail

/// \brief Checks an MPI call: on failure throws Error(io) with the call as written and MPI's message.
#define DSV32_MPI_CHECK(call) ::dsv32::detail::mpi_check((call), #call)

/// \brief Initializes MPI for the life of the object, and finalizes it unless it was initialized before.
///
/// A program that initializes MPI itself (or embeds dsv32 in an MPI application) may skip this
/// class: MpiCommunicator needs only MPI to be initialized, and MPI is then never finalized by dsv32.
class MpiSession {
 public:
  /// \brief Initializes MPI with MPI_Init_thread(argc, argv, `required`) unless it is already
  ///        initialized. The default, MPI_THREAD_FUNNELED, suffices for dsv32: collectives are called
  ///        from the thread that runs forward(); OpenMP threads only compute.
  /// \throws Error(io) if MPI_Init_thread fails; Error(unsupported) if MPI provides a lower thread level.
  MpiSession(int& argc, char**& argv, int required = MPI_THREAD_FUNNELED) { init(&argc, &argv, required); }
  /// \brief As above, without the command line.
  explicit MpiSession(int required = MPI_THREAD_FUNNELED) { init(nullptr, nullptr, required); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  /// \brief MPI_Finalize, if this object initialized MPI and it is not finalized yet.
  ~MpiSession() {
    if (owns_ && !detail::mpi_finalized()) MPI_Finalize();
  }

  /// \brief Whether this object initialized MPI (and finalizes it).
  bool owns() const noexcept { return owns_; }
  /// \brief Ranks in MPI_COMM_WORLD.
  int world_size() const {
    int n = 0;
    DSV32_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &n));
    return n;
  }
  /// \brief This process's rank in MPI_COMM_WORLD.
  int rank() const {
    int r = 0;
    DSV32_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &r));
    return r;
  }

  /// \brief Whether this process was started by an MPI launcher (mpirun, mpiexec, srun with PMI/PMIx):
  ///        a tool can then initialize MPI, and run alone otherwise without touching MPI at all.
  static bool launched_by_mpi() noexcept {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"})
      if (std::getenv(v) != nullptr) return true;
    return false;
  }
  /// \brief Ends every process of MPI_COMM_WORLD with exit status `code` (MPI_Abort): for a failure that
  ///        leaves other ranks inside a collective, where only the launcher can stop them.
  [[noreturn]] static void abort(int code) noexcept {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  void init(int* argc, char*** argv, int required) {
    if (detail::mpi_initialized()) return;
    int provided = 0;
    DSV32_MPI_CHECK(MPI_Init_thread(argc, argv, required, &provided));
    owns_ = true;
    if (provided < required) {
      MPI_Finalize();
      owns_ = false;
      fail(ErrorKind::unsupported, "MPI provides thread level ", provided, " but ", required, " is required");
    }
  }

  bool owns_ = false;
};

/// \brief What an MpiCommunicator did since construction or its last reset_stats(): for benchmarks.
struct CommunicatorStats {
  std::int64_t collectives = 0;  ///< model collectives (all-reduce, all-gather, broadcast) called
  std::uint64_t bytes_sent = 0;  ///< bytes this rank sent to other ranks in them
  double seconds = 0;            ///< wall time spent in them (waiting for the other ranks included)
};

/// \brief A Communicator over MPI: one rank per process, ranks possibly on different hosts.
///
/// It works on a duplicate of the given MPI communicator (so its messages never match the
/// application's), with MPI_ERRORS_RETURN. The ranks exchange host memory: on a backend the host
/// cannot read, each collective stages its buffers through host copies (as ThreadCommunicator
/// does); a device-memory transport is NCCL's job. Not copyable; it must outlive the models using it
/// and be destroyed before MPI is finalized. One thread at a time may use it.
/// \tparam Backend the backend of the models whose ranks it connects
template <class Backend = Cpu>
class MpiCommunicator : public Communicator<Backend> {
  using space = space_of<Backend>;

 public:
  /// \brief The ranks of `comm` (default MPI_COMM_WORLD), this process being rank MPI_Comm_rank.
  /// \throws Error(state) if MPI is not initialized (create an MpiSession first); Error(io) if a call fails.
  explicit MpiCommunicator(MPI_Comm comm = MPI_COMM_WORLD) {
    DSV32_CHECK(detail::mpi_initialized() && !detail::mpi_finalized(), state,
                "MpiCommunicator: MPI is not initialized (create a dsv32::MpiSession, or call MPI_Init, first)");
    DSV32_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
    DSV32_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    DSV32_MPI_CHECK(MPI_Comm_size(comm_, &world_));
    DSV32_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  ~MpiCommunicator() override {
    if (!detail::mpi_finalized()) MPI_Comm_free(&comm_);
  }

  int world_size() const override { return world_; }
  int rank() const override { return rank_; }
  /// \brief The MPI communicator the collectives run on (a duplicate of the one given).
  MPI_Comm handle() const noexcept { return comm_; }

  /// \brief Element-wise f32 sum of every rank's `data` in rank order, on every rank.
  void all_reduce_sum(ExecutionContext<Backend>& ctx, VectorView<float, space> data) override {
    const Timer t(stats_);
    float* host = staging_.down(ctx, data.data, data.size);
    reduce(host, data.size, MPI_FLOAT);
    staging_.up(ctx, data.data, host, data.size);
  }
  /// \brief Element-wise sum of every rank's bf16 `data`: widened to f32, summed in rank order,
  ///        rounded once; exchanged as bf16.
  void all_reduce_sum(ExecutionContext<Backend>& ctx, VectorView<bf16, space> data) override {
    const Timer t(stats_);
    bf16* host = staging_.down(ctx, data.data, data.size);
    reduce(host, data.size, MPI_UINT16_T);
    staging_.up(ctx, data.data, host, data.size);
  }
  /// \brief Concatenates every rank's `local` in rank order into `out`.
  /// \throws Error(invalid_argument) unless `out` is world_size() times `local`.
  void all_gather(ExecutionContext<Backend>& ctx, VectorView<const float, space> local,
                  VectorView<float, space> out) override {
    const Timer t(stats_);
    DSV32_CHECK(out.size == local.size * world_, invalid_argument, "MpiCommunicator: all_gather of ", local.size,
                " elements per rank needs an output of ", local.size * world_, ", got ", out.size);
    const int n = count(local.size);
    const float* mine = staging_.down(ctx, const_cast<float*>(local.data), local.size);
    float* dst = staging_.out(out.data, out.size);
    DSV32_MPI_CHECK(MPI_Allgather(mine, n, MPI_FLOAT, dst, n, MPI_FLOAT, comm_));
    stats_.bytes_sent += static_cast<std::uint64_t>(n) * sizeof(float) * static_cast<std::uint64_t>(world_ - 1);
    staging_.up(ctx, out.data, dst, out.size);
  }
  /// \brief Copies rank `root`'s `data` into every rank's `data`.
  /// \throws Error(invalid_argument) for a root outside the group.
  void broadcast(ExecutionContext<Backend>& ctx, VectorView<std::byte, space> data, int root) override {
    const Timer t(stats_);
    std::byte* host = staging_.down(ctx, data.data, data.size);
    broadcast_host(std::span(host, static_cast<std::size_t>(data.size)), root);
    if (rank_ == root) stats_.bytes_sent += static_cast<std::uint64_t>(data.size) * static_cast<std::uint64_t>(world_ - 1);
    staging_.up(ctx, data.data, host, data.size);
  }
  /// \brief Copies rank `root`'s host bytes into every rank's `data` (MPI_Bcast, in pieces of at most
  ///        2^31 - 1 bytes).
  /// \throws Error(invalid_argument) for a root outside the group.
  void broadcast_host(std::span<std::byte> data, int root) override {
    DSV32_CHECK(root >= 0 && root < world_, invalid_argument, "MpiCommunicator: broadcast root ", root, " outside [0, ",
                world_, ")");
    for (std::size_t first = 0; first < data.size(); first += INT_MAX) {
      const int n = static_cast<int>(std::min<std::size_t>(INT_MAX, data.size() - first));
      DSV32_MPI_CHECK(MPI_Bcast(data.data() + first, n, MPI_BYTE, root, comm_));
    }
  }
  /// \brief The minimum of every rank's `value` (MPI_Allreduce, MPI_MIN), on every rank.
  std::int64_t all_reduce_min_host(std::int64_t value) override {
    std::int64_t m = 0;
    DSV32_MPI_CHECK(MPI_Allreduce(&value, &m, 1, MPI_INT64_T, MPI_MIN, comm_));
    return m;
  }

  /// \brief Collectives, bytes sent and time spent since construction or the last reset_stats().
  const CommunicatorStats& stats() const noexcept { return stats_; }
  /// \brief Zeroes stats().
  void reset_stats() noexcept { stats_ = {}; }

 private:
  // Adds the wall time of a collective to the stats.
  struct Timer {
    explicit Timer(CommunicatorStats& s) : stats(s), start(std::chrono::steady_clock::now()) { ++s.collectives; }
    ~Timer() { stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
    CommunicatorStats& stats;
    std::chrono::steady_clock::time_point start;
  };

  int count(std::int64_t n) const {
    DSV32_CHECK(n >= 0 && n <= INT_MAX, invalid_argument, "MpiCommunicator: a collective of ", n,
                " elements exceeds MPI's count limit (2^31 - 1)");
    return static_cast<int>(n);
  }

  // The in-place sum of every rank's `data` (T = float or bf16, sent as `type`): rank r sums the r-th
  // chunk of every rank's buffer in rank order in f32, then the chunks are gathered everywhere.
  template <class T>
  void reduce(T* data, std::int64_t size, MPI_Datatype type) {
    const int n = count(size), world = world_;
    const int chunk = (n + world - 1) / world;
    chunk_counts_.assign(static_cast<std::size_t>(world), 0);
    chunk_firsts_.assign(static_cast<std::size_t>(world), 0);
    for (int r = 0; r < world; ++r) {
      chunk_firsts_[static_cast<std::size_t>(r)] = std::min(n, r * chunk);
      chunk_counts_[static_cast<std::size_t>(r)] = std::min(n, (r + 1) * chunk) - chunk_firsts_[static_cast<std::size_t>(r)];
    }
    const int mine = chunk_counts_[static_cast<std::size_t>(rank_)], first = chunk_firsts_[static_cast<std::size_t>(rank_)];
    // Every rank's copy of my chunk, rank after rank.
    received_.resize(static_cast<std::size_t>(mine) * static_cast<std::size_t>(world) * sizeof(T));
    T* theirs = reinterpret_cast<T*>(received_.data());
    recv_counts_.assign(static_cast<std::size_t>(world), mine);
    recv_firsts_.resize(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) recv_firsts_[static_cast<std::size_t>(r)] = r * mine;
    DSV32_MPI_CHECK(MPI_Alltoallv(data, chunk_counts_.data(), chunk_firsts_.data(), type, theirs, recv_counts_.data(),
                                  recv_firsts_.data(), type, comm_));
    for (int i = 0; i < mine; ++i) {
      float sum = 0.0f;  // as ThreadCommunicator: from +0, rank by rank
      for (int r = 0; r < world; ++r) sum += static_cast<float>(theirs[static_cast<std::size_t>(r) * mine + i]);
      data[first + i] = T(sum);
    }
    DSV32_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, type, data, chunk_counts_.data(), chunk_firsts_.data(), type, comm_));
    stats_.bytes_sent += (static_cast<std::uint64_t>(n - mine) + static_cast<std::uint64_t>(mine) * (world - 1)) * sizeof(T);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int world_ = 1, rank_ = 0;
  detail::HostStaging<Backend> staging_;
  std::vector<int> chunk_counts_, chunk_firsts_, recv_counts_, recv_firsts_;
  std::vector<std::byte> received_;
  CommunicatorStats stats_;
};

/// @}

}  // namespace dsv32
