// The NCCL unique id over MPI (<dsv32/parallel/nccl_mpi_bootstrap.hpp>), run by ctest under `mpirun -n 2`
// (tests/cuda/tests.cmake). No GPU is needed: ncclGetUniqueId opens a socket, and nothing here
// initializes an NCCL communicator.
//  - every rank receives rank 0's id byte for byte (from an MPI_Comm and from an MpiCommunicator, root 0
//    and root 1), with its MPI rank and world size; mpi_local_rank() on one host is the rank;
//  - with --expect-id-failure (ctest sets NCCL_SOCKET_IFNAME to an interface that does not exist, so
//    the root's ncclGetUniqueId fails), every rank throws the root's error: none waits for an id.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <dsv32/mpi.hpp>
#include <dsv32/parallel/nccl_mpi_bootstrap.hpp>

#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace {

bool expect_id_failure = false;

dsv32::MpiCommunicator<>& mpi() {
  static dsv32::MpiCommunicator<> comm;
  return comm;
}

// Rank `root`'s bytes of `id`, on every rank.
ncclUniqueId from_rank(const ncclUniqueId& id, int root) {
  ncclUniqueId copy = id;
  mpi().broadcast_host(std::as_writable_bytes(std::span(&copy, 1)), root);
  return copy;
}

}  // namespace

TEST_CASE("nccl_bootstrap_over_mpi: every rank gets the root's id, its rank and the world size") {
  if (expect_id_failure) return;
  const dsv32::NcclBootstrap b = dsv32::nccl_bootstrap_over_mpi(MPI_COMM_WORLD);
  CHECK(b.world_size == mpi().world_size());
  CHECK(b.rank == mpi().rank());
  const ncclUniqueId root = from_rank(b.id, 0);
  CHECK(std::memcmp(&root, &b.id, sizeof root) == 0);
  CHECK_NOTHROW(b.validate());

  // From an MpiCommunicator, another root: a new id, again the same everywhere.
  const dsv32::NcclBootstrap c = dsv32::nccl_bootstrap_over_mpi(mpi(), 1);
  const ncclUniqueId root1 = from_rank(c.id, 1);
  CHECK(std::memcmp(&root1, &c.id, sizeof root1) == 0);
  CHECK(std::memcmp(&c.id, &b.id, sizeof c.id) != 0);

  CHECK_THROWS_WITH_AS(dsv32::nccl_bootstrap_over_mpi(MPI_COMM_WORLD, 2), doctest::Contains("root 2 outside [0, 2)"),
                       dsv32::Error);
  // Both ranks run on this host: the local rank is the rank.
  CHECK(dsv32::mpi_local_rank() == mpi().rank());
}

TEST_CASE("nccl_bootstrap_over_mpi: when the root cannot make an id, every rank throws its error") {
  if (!expect_id_failure) return;
  try {
    (void)dsv32::nccl_bootstrap_over_mpi(MPI_COMM_WORLD);
    FAIL("no error thrown");
  } catch (const dsv32::Error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("rank 0 of 2 could not make the NCCL unique id: ncclGetUniqueId(&id) failed at ") !=
          std::string::npos);
  }
}

int main(int argc, char** argv) {
  dsv32::MpiSession session(argc, argv);
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--expect-id-failure") == 0) expect_id_failure = true;
    else args.push_back(argv[i]);
  }
  int failed = 0;
  {
    doctest::Context context(static_cast<int>(args.size()), args.data());
    failed = context.run();
    if (context.shouldExit()) return failed;
    failed = mpi().all_reduce_min_host(failed == 0 ? 0 : -1) < 0 ? 1 : 0;
  }
  return failed;
}
