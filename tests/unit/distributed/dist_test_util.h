// The communicator of the dist tests: MPI under mpirun (tests/cli/dist_comm.sh), else one local
// process. One per test executable, shared by every test file.
#pragma once
#include <memory>

#include "distributed/comm.h"

namespace titan::distributed {

inline Comm& test_comm() {
  static std::unique_ptr<Comm> c = make_comm();
  return *c;
}

}  // namespace titan::distributed
