/// \file
/// \brief The model-parallel seam: world size, rank and the communicator every collective goes through.
///
/// The reference splits the model over ranks: vocabulary-split embedding (all-reduce), column- and
/// row-parallel linears (all-reduce after row-parallel ones), experts partitioned by rank
/// (all-reduce of the MoE output) and a vocabulary-split head (all-gather of the logits). Every
/// layer's local shapes come from the tensor table (config/tensor_table.hpp) for (world, rank); its
/// collectives go through a Communicator<Backend>, on the backend's memory, ordered on the model's
/// ExecutionContext. With one rank no communicator is called at all.
///
/// Nothing here assumes that the ranks share an address space: a rank hands a collective only its
/// own buffers, so the same interface serves threads of one process (ThreadCommunicator), processes
/// and hosts (MpiCommunicator, <dsv32/mpi.hpp>) and GPUs (NCCL, on the backend's stream).
///
/// Besides the model's collectives on backend memory, every communicator has a small control plane
/// on host memory (CommunicatorBase::broadcast_host(), CommunicatorBase::all_reduce_min_host()): what
/// the ranks agree on outside a forward pass — whether every rank loaded its weights
/// (run_collectively()), the prompts rank 0 read (GenerationGroup, <dsv32/generate/group.hpp>).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "dsv32/core/error.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/space.hpp"
#include "dsv32/core/tensor.hpp"

namespace dsv32 {

/// \addtogroup core
/// @{

/// \brief What every communicator tells about itself, whatever memory it works on.
class CommunicatorBase {
 public:
  virtual ~CommunicatorBase() = default;
  /// \brief Number of ranks.
  virtual int world_size() const = 0;
  /// \brief This process's (or thread's) rank.
  virtual int rank() const = 0;
  /// \brief The name of the memory space its collectives read and write (`Memory<Backend>::space::name`).
  virtual const char* space_name() const = 0;

  /// \brief Control plane: copies rank `root`'s host bytes `data` into every rank's `data` (same size
  ///        on every rank). For what the ranks agree on outside a forward pass (prompts, status).
  virtual void broadcast_host(std::span<std::byte> data, int root) = 0;
  /// \brief Control plane: the minimum of every rank's `value`, returned on every rank.
  virtual std::int64_t all_reduce_min_host(std::int64_t value) = 0;
};

/// \brief Collective operations over the ranks of a model-parallel group, on memory of `Backend`'s
///        space, ordered on the caller's ExecutionContext<Backend>.
///
/// Every rank of the group makes the same sequence of calls with the same sizes (as with MPI or
/// NCCL). Sums are deterministic and identical on every rank.
/// \tparam Backend the backend whose memory the collectives take
template <class Backend>
class Communicator : public CommunicatorBase {
 public:
  using space = space_of<Backend>;  ///< the memory space of every buffer passed in

  /// \brief Element-wise f32 sum of every rank's `data`, written to every rank's `data`.
  virtual void all_reduce_sum(ExecutionContext<Backend>& ctx, VectorView<float, space> data) = 0;
  /// \brief Element-wise sum of every rank's bf16 `data`, taken in f32 and rounded to bf16 once.
  virtual void all_reduce_sum(ExecutionContext<Backend>& ctx, VectorView<bf16, space> data) = 0;
  /// \brief Concatenates every rank's `local` in rank order into `out` (world_size() * local.size).
  virtual void all_gather(ExecutionContext<Backend>& ctx, VectorView<const float, space> local,
                          VectorView<float, space> out) = 0;
  /// \brief Copies rank `root`'s `data` into every rank's `data`.
  virtual void broadcast(ExecutionContext<Backend>& ctx, VectorView<std::byte, space> data, int root) = 0;

  /// \brief The name of `Backend`'s memory space.
  const char* space_name() const final { return space::name; }
};

/// \brief This rank's place in the model-parallel group.
struct Parallel {
  int world_size = 1;  ///< ranks in the group; each holds 1 / world_size of the sharded weights
  int rank = 0;        ///< this rank, in [0, world_size)
  CommunicatorBase* comm = nullptr;  ///< required when world_size > 1; must work on the model's backend

  /// \brief A Parallel for a communicator's group.
  static Parallel from(CommunicatorBase& c) { return Parallel{c.world_size(), c.rank(), &c}; }

  /// \brief Checks that the description is consistent (rank in range, communicator present).
  void validate() const {
    DSV32_CHECK(world_size >= 1, invalid_argument, "world size must be >= 1, got ", world_size);
    DSV32_CHECK(rank >= 0 && rank < world_size, invalid_argument, "rank ", rank, " outside [0, ", world_size, ")");
    DSV32_CHECK(world_size == 1 || comm != nullptr, invalid_argument, "world size ", world_size,
                " needs a Communicator");
  }
  /// \brief `total / world_size`, with an error naming `what` unless it divides evenly.
  std::int64_t split(std::int64_t total, const char* what) const {
    DSV32_CHECK(total % world_size == 0, invalid_argument, what, " (", total,
                ") must be divisible by the world size (", world_size, ")");
    return total / world_size;
  }
  /// \brief The communicator as one for `Backend`'s memory; nullptr with one rank.
  /// \throws Error(invalid_argument) when it works on another memory space than the backend's.
  template <class Backend>
  Communicator<Backend>* communicator_for() const {
    if (world_size == 1) return nullptr;
    auto* typed = dynamic_cast<Communicator<Backend>*>(comm);
    DSV32_CHECK(typed != nullptr, invalid_argument, "the model runs on backend ", Backend::name, " (memory space ",
                space_of<Backend>::name, ") but its communicator works on memory space ",
                comm ? comm->space_name() : "?", " (give its ranks a communicator of that backend, e.g. ThreadCommunicator<Backend>)");
    return typed;
  }
};

/// \brief Runs `step` on this rank, then agrees with every other rank of `comm` on the outcome: either
///        every rank's `step` succeeded, or every rank throws the same Error.
///
/// Without it a rank whose step fails (a missing shard, a config that does not divide, too little
/// memory on its host) would leave the others waiting forever in their first collective. Every rank
/// of the group must call it, once per step, in the same order. The Error every rank throws names the
/// lowest failing rank and carries its message (with its ErrorKind, or ErrorKind::state for an
/// exception that is not a dsv32::Error), and the next failing rank if there is one:
/// `dsv32 [io]: rank 1 of 2 failed loading: checkpoint directory d holds neither model1-mp2.safetensors ...`.
/// With `comm` null (one rank) it just runs `step`.
/// \param comm the group (nullptr: one rank)
/// \param what what the step does, for the message ("loading")
/// \param step called once on this rank
/// \throws Error as above; what `step` throws, unchanged, when `comm` is null.
template <class Step>
void run_collectively(CommunicatorBase* comm, const char* what, Step&& step) {
  if (comm == nullptr || comm->world_size() == 1) {
    std::forward<Step>(step)();
    return;
  }
  const int world = comm->world_size(), rank = comm->rank();
  std::string message;
  ErrorKind kind = ErrorKind::state;
  bool failed = false;
  try {
    std::forward<Step>(step)();
  } catch (const Error& e) {
    failed = true, kind = e.kind(), message = e.message();
  } catch (const std::exception& e) {
    failed = true, message = e.what();
  } catch (...) {
    failed = true, message = "an exception that is not a std::exception";
  }
  // Which rank failed first (world: none), and which next.
  const std::int64_t first = comm->all_reduce_min_host(failed ? rank : world);
  if (first == world) return;
  const std::int64_t next = comm->all_reduce_min_host(failed && rank != first ? rank : world);
  // The first failing rank's kind and message, to every rank.
  std::int64_t header[2] = {static_cast<std::int64_t>(kind), static_cast<std::int64_t>(message.size())};
  comm->broadcast_host(std::as_writable_bytes(std::span(header)), static_cast<int>(first));
  message.resize(static_cast<std::size_t>(header[1]));
  comm->broadcast_host(std::as_writable_bytes(std::span(message.data(), message.size())), static_cast<int>(first));
  const std::string others =
      next < world ? detail::concat(" (rank ", next, next + 1 < world ? " and maybe others" : "", " failed too)") : "";
  fail(static_cast<ErrorKind>(header[0]), "rank ", first, " of ", world, " failed ", what, others, ": ", message);
}

/// \brief Checks that every rank of `comm` holds the same `value` (e.g. its config.json, read from its
///        own disk): throws the same Error(invalid_config) on every rank otherwise, naming the first
///        rank that differs from rank 0. Ranks compare 64-bit FNV-1a digests, not the values.
/// \param comm  the group (nullptr: one rank, nothing to check)
/// \param value this rank's value
/// \param what  what it is, for the message ("the checkpoint's config.json")
inline void check_same_on_all_ranks(CommunicatorBase* comm, std::string_view value, const char* what) {
  if (comm == nullptr || comm->world_size() == 1) return;
  std::uint64_t digest = 14695981039346656037ull;
  for (const char c : value) digest = (digest ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  std::uint64_t rank0 = digest;
  comm->broadcast_host(std::as_writable_bytes(std::span(&rank0, 1)), 0);
  const int world = comm->world_size();
  const std::int64_t first = comm->all_reduce_min_host(digest != rank0 ? comm->rank() : world);
  DSV32_CHECK(first == world, invalid_config, "rank ", first, " of ", world, " disagrees with rank 0 on ", what,
              " (every rank must run the same model)");
}

/// @}

}  // namespace dsv32
