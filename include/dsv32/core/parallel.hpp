/// \file
/// \brief The model-parallel seam: world size, rank and the one communicator every reduction uses.
///
/// The reference splits the model over ranks: vocabulary-split embedding (all-reduce), column- and
/// row-parallel linears (all-reduce after row-parallel ones), experts partitioned by rank
/// (all-reduce of the MoE output) and a vocabulary-split head (all-gather of the logits). Every
/// layer computes its local shapes from (config, Parallel) and sends its reductions through
/// Communicator; with one rank no communicator is called at all.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsv32/core/error.hpp"

namespace dsv32 {

/// \addtogroup core
/// @{

/// \brief Collective operations over the ranks of a model-parallel group.
///
/// Pointers address memory of the backend the model runs on (host memory for Cpu, device
/// memory for Cuda, where an NCCL communicator fits behind this interface).
class Communicator {
 public:
  virtual ~Communicator() = default;
  /// \brief Number of ranks.
  virtual int world_size() const = 0;
  /// \brief This process's (or thread's) rank.
  virtual int rank() const = 0;
  /// \brief Element-wise sum of `data[0, n)` over all ranks, result on every rank.
  virtual void all_reduce_sum(float* data, std::size_t n) = 0;
  /// \brief Concatenates every rank's `local[0, n)` in rank order into `out[0, world * n)`.
  virtual void all_gather(const float* local, std::size_t n, float* out) = 0;
};

/// \brief This rank's place in the model-parallel group.
struct Parallel {
  int world_size = 1;  ///< ranks in the group; each holds 1 / world_size of the sharded weights
  int rank = 0;        ///< this rank, in [0, world_size)
  Communicator* comm = nullptr;  ///< required when world_size > 1

  /// \brief A Parallel for a communicator's group.
  static Parallel from(Communicator& c) { return Parallel{c.world_size(), c.rank(), &c}; }

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
  /// \brief Sum over ranks; free with one rank.
  void all_reduce_sum(float* data, std::size_t n) const {
    if (world_size > 1) comm->all_reduce_sum(data, n);
  }
};

/// @}

}  // namespace dsv32
