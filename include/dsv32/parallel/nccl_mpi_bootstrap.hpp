/// \file
/// \brief Bootstrapping an NCCL group over MPI: rank 0 makes the unique id and MPI_Bcast hands it to the
///        others (nccl_bootstrap_over_mpi()), and mpi_local_rank() says which GPU of its host a rank takes.
///
/// \code
/// dsv32::MpiSession mpi(argc, argv);
/// dsv32::MpiCommunicator<> world;                                  // MPI_COMM_WORLD's ranks
/// const int gpu = dsv32::mpi_local_rank();                         // one GPU per rank on each host
/// dsv32::NcclCommunicator comm(dsv32::nccl_bootstrap_over_mpi(world), gpu);  // makes `gpu` current
/// dsv32::Transformer<MyConfig, dsv32::Cuda> model(options, dsv32::Parallel::from(comm));
/// \endcode
///
/// NcclCommunicator itself does not depend on MPI (a single process, or a program that hands the id
/// over by other means, needs none): "constructing it from MPI" is constructing it from the
/// NcclBootstrap made here, from an MPI_Comm or an MpiCommunicator.
///
/// Host header; needs both optional components: link dsv32::nccl and dsv32::mpi.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "dsv32/parallel/mpi_communicator.hpp"
#include "dsv32/parallel/nccl_bootstrap.hpp"

namespace dsv32 {

/// \addtogroup cuda
/// @{

/// \brief Every rank's NcclBootstrap for the ranks of `comm`: rank `root` makes the unique id and
///        MPI_Bcast hands it to the others; rank and world size are `comm`'s. Every rank of `comm` must
///        call it. Needs no GPU.
///
/// If the root cannot make an id, every rank throws the same Error, carrying the root's message (the
/// root broadcasts its status with the id, so no rank is left waiting in a later call).
/// \param comm the MPI communicator whose ranks form the NCCL group (MPI must be initialized)
/// \param root the rank that makes the id
/// \throws Error(invalid_argument) for a root outside `comm`; Error(io) when an MPI call fails; on every
///         rank, the root's Error when ncclGetUniqueId fails there
inline NcclBootstrap nccl_bootstrap_over_mpi(MPI_Comm comm, int root = 0) {
  DSV32_CHECK(detail::mpi_initialized() && !detail::mpi_finalized(), state,
              "nccl_bootstrap_over_mpi: MPI is not initialized (create a dsv32::MpiSession, or call MPI_Init, first)");
  NcclBootstrap b;
  DSV32_MPI_CHECK(MPI_Comm_size(comm, &b.world_size));
  DSV32_MPI_CHECK(MPI_Comm_rank(comm, &b.rank));
  DSV32_CHECK(root >= 0 && root < b.world_size, invalid_argument, "nccl_bootstrap_over_mpi: root ", root,
              " outside [0, ", b.world_size, ")");
  // What the root sends: its status (an ErrorKind + 1, or 0 for success), its message, the id.
  struct Packet {
    std::int32_t failed = 0;
    char message[1024] = {};
    ncclUniqueId id{};
  } packet;
  if (b.rank == root) {
    try {
      packet.id = make_nccl_unique_id();
    } catch (const Error& e) {
      packet.failed = static_cast<std::int32_t>(e.kind()) + 1;
      const std::string& m = e.message();
      std::memcpy(packet.message, m.data(), std::min(m.size(), sizeof packet.message - 1));
    }
  }
  DSV32_MPI_CHECK(MPI_Bcast(&packet, static_cast<int>(sizeof packet), MPI_BYTE, root, comm));
  if (packet.failed != 0)
    fail(static_cast<ErrorKind>(packet.failed - 1), "rank ", root, " of ", b.world_size,
         " could not make the NCCL unique id: ", packet.message);
  b.id = packet.id;
  return b;
}

/// \brief As above, for the ranks of an MpiCommunicator (on its duplicate of the MPI communicator).
/// \tparam Backend the MpiCommunicator's backend (irrelevant here: only its MPI communicator is used)
template <class Backend>
NcclBootstrap nccl_bootstrap_over_mpi(const MpiCommunicator<Backend>& comm, int root = 0) {
  return nccl_bootstrap_over_mpi(comm.handle(), root);
}

/// \brief This rank's index among the ranks of `comm` on the same host (MPI_Comm_split_type with
///        MPI_COMM_TYPE_SHARED, ordered by rank): the CUDA device a rank takes when every rank sees all
///        of its host's GPUs. Every rank of `comm` must call it.
/// \throws Error(io) when an MPI call fails
inline int mpi_local_rank(MPI_Comm comm = MPI_COMM_WORLD) {
  int rank = 0, local = 0;
  DSV32_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_Comm host = MPI_COMM_NULL;
  DSV32_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host));
  const int status = MPI_Comm_rank(host, &local);
  MPI_Comm_free(&host);
  DSV32_MPI_CHECK(status);
  return local;
}

/// @}

}  // namespace dsv32
