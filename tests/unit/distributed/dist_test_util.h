// The communicator of the dist tests: MPI under mpirun (tests/cli/dist_comm.sh), else one local
// process. One per test executable, shared by every test file.
#pragma once
#include <memory>

#include "comm/comm.h"
#include "distributed/backends.h"

namespace titan::distributed {

using comm::Comm;
using comm::ReduceOp;
using comm::LocalComm;

inline Comm& test_comm() {
  static std::unique_ptr<Comm> c = make_comm();
  return *c;
}

}  // namespace titan::distributed
