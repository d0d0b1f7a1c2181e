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

}  // namespace titan::distributed
