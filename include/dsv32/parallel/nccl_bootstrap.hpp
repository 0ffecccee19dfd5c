/// \file
/// \brief NcclBootstrap: what a rank needs to join an NCCL group — the group's unique id (made once, by
///        one rank, with ncclGetUniqueId), its rank and the world size.
///
/// How the id reaches the other ranks is the caller's choice: over MPI with
/// nccl_bootstrap_over_mpi() (<dsv32/parallel/nccl_mpi_bootstrap.hpp>, needs dsv32::mpi), through a file or a
/// key-value store of the caller's own, or not at all for one rank (NcclBootstrap::single()).
///
/// Host header of the optional NCCL component (nccl.h; link dsv32::nccl). A host compiler compiles it.
#pragma once

#include <nccl.h>

#include "dsv32/core/error.hpp"
#include "dsv32/parallel/nccl_check.hpp"

namespace dsv32 {

/// \addtogroup cuda
/// @{

/// \brief A new NCCL unique id (ncclGetUniqueId): call it on one rank and hand the same bytes to every
///        rank of the group. Needs no GPU (it opens NCCL's bootstrap socket).
/// \throws Error naming ncclGetUniqueId and NCCL's message when it fails (e.g. no usable network interface)
inline ncclUniqueId make_nccl_unique_id() {
  ncclUniqueId id{};
  DSV32_NCCL_CHECK(ncclGetUniqueId(&id));
  return id;
}

/// \brief This rank's ticket to an NCCL group: the group's unique id, the rank, the world size.
struct NcclBootstrap {
  ncclUniqueId id{};   ///< the group's id: the same bytes on every rank (made by one of them)
  int rank = 0;        ///< this rank, in [0, world_size)
  int world_size = 1;  ///< ranks in the group, one GPU each

  /// \brief A group of one rank (rank 0 of 1) with a fresh id: a single-process NcclCommunicator, which
  ///        needs no MPI.
  /// \throws as make_nccl_unique_id()
  static NcclBootstrap single() { return NcclBootstrap{make_nccl_unique_id(), 0, 1}; }

  /// \brief Checks that the rank lies in [0, world_size) and world_size >= 1.
  /// \throws Error(invalid_argument) naming the values otherwise
  void validate() const {
    DSV32_CHECK(world_size >= 1, invalid_argument, "NCCL bootstrap: world size must be >= 1, got ", world_size);
    DSV32_CHECK(rank >= 0 && rank < world_size, invalid_argument, "NCCL bootstrap: rank ", rank, " outside [0, ",
                world_size, ")");
  }
};

/// @}

}  // namespace dsv32
