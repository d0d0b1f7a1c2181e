// Which communicator a process gets: the MPI backend when an MPI launcher started it, else one
// local process. (The interface and the in-process backends are comm/; only MPI lives here.)
#pragma once
#include <memory>

#include "comm/comm.h"

namespace titan::distributed {

// True when this process was started by an MPI launcher (mpirun/mpiexec/srun set PMIx or
// OMPI_COMM_WORLD_* variables). TITAN_COMM=local|mpi overrides the detection.
bool launched_by_mpi();
// MpiComm when launched_by_mpi(), else LocalComm. The MPI library is initialised at most once per
// process; the returned object finalises it when destroyed.
std::unique_ptr<comm::Comm> make_comm();
// The MPI backend (error when MPI cannot be initialised).
std::unique_ptr<comm::Comm> make_mpi_comm();

}  // namespace titan::distributed
