// Which communicator a process gets: the MPI backend when an MPI launcher started it, else one
// local process; and, for a model on the GPU, the NCCL backend over it. (The interface, the
// in-process backends and the NCCL backend's logic are comm/; MPI and the choice live here.)
#pragma once
#include <memory>

#include "comm/comm.h"
#include "comm/nccl_comm.h"

namespace titan::distributed {

// True when this process was started by an MPI launcher (mpirun/mpiexec/srun set PMIx or
// OMPI_COMM_WORLD_* variables). TITAN_COMM=local|mpi overrides the detection.
bool launched_by_mpi();
// MpiComm when launched_by_mpi(), else LocalComm. The MPI library is initialised at most once per
// process; the returned object finalises it when destroyed.
std::unique_ptr<comm::Comm> make_comm();
// The MPI backend (error when MPI cannot be initialised).
std::unique_ptr<comm::Comm> make_mpi_comm();

// True when this build runs NCCL: TITAN_CUDA_RUNTIME=ON with the NCCL library (cmake/cuda.cmake).
bool nccl_available();
// The communicator of a data-parallel run whose model is on the GPU (DataParallel's device path):
// NCCL, one rank per GPU, bootstrapped over `bootstrap` (make_comm()'s communicator: the unique id
// travels over it, and point-to-point, barrier and split stay on it), which must outlive the
// result. Collective over `bootstrap`. Without NCCL in this build (nccl_available() false; the
// grid emulator cannot run several GPU processes) a one-line error says so.
std::unique_ptr<comm::NcclComm> make_nccl_comm(comm::Comm& bootstrap);

}  // namespace titan::distributed
