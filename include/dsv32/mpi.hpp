/// \file
/// \brief dsv32 over MPI, the umbrella header of the optional `dsv32::mpi` component: everything of
///        <dsv32/dsv32.hpp>, plus MpiCommunicator and MpiSession (model parallelism across processes
///        and hosts). Link `dsv32::mpi` (which brings MPI::MPI_CXX); see docs/parallelism.md.
#pragma once

#include "dsv32/dsv32.hpp"
#include "dsv32/parallel/mpi_communicator.hpp"
