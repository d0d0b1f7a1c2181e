#include "distributed/backends.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace titan::distributed {

bool launched_by_mpi() {
  if (const char* f = std::getenv("TITAN_COMM")) {
    std::string s = f;
    TITAN_CHECK(s == "local" || s == "mpi", "TITAN_COMM must be 'local' or 'mpi', got '", s, "'");
    return s == "mpi";
  }
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

std::unique_ptr<comm::Comm> make_comm() {
  if (launched_by_mpi()) return make_mpi_comm();
  return std::make_unique<comm::LocalComm>();
}

// TITAN_NCCL_RUNTIME: set on this file alone by cmake/cuda.cmake when TITAN_CUDA_RUNTIME=ON links
// libnccl (comm/nccl_runtime.cu's cuda_nccl_api() exists only then).
bool nccl_available() {
#ifdef TITAN_NCCL_RUNTIME
  return true;
#else
  return false;
#endif
}

std::unique_ptr<comm::NcclComm> make_nccl_comm(comm::Comm& bootstrap) {
#ifdef TITAN_NCCL_RUNTIME
  // Stateless calls into NCCL and the CUDA runtime: one for the process, never destroyed (a
  // communicator may outlive static destruction order).
  static comm::nccl::Api* api = comm::nccl::cuda_nccl_api().release();
  return std::make_unique<comm::NcclComm>(bootstrap, *api);
#else
  (void)bootstrap;
  fail(
      "data parallelism on the GPU needs NCCL, which this build lacks: configure with -DTITAN_CUDA_RUNTIME=ON where "
      "the CUDA toolkit and NCCL are installed (the grid emulator runs one process)");
#endif
}

}  // namespace titan::distributed
