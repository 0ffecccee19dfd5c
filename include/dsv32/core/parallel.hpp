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
/// and hosts (MPI) and GPUs (NCCL, on the backend's stream).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/cpu/memory.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/core/numeric.hpp"
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

/// @}

}  // namespace dsv32
