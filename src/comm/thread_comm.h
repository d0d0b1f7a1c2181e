// The in-process threaded backend: N ranks as N threads of one process, exchanging through shared
// memory. For tests of 2-D and 3-D meshes (and anything collective) without mpirun: ctest runs
// them as ordinary unit tests. Same semantics as the MPI backend — rank-order reductions (they
// are Comm's), split by color and key, in-order point-to-point per pair, the timeout — so a case
// that passes here and under MPI tests the algorithm, not the transport.
#pragma once
#include <functional>

#include "comm/comm.h"

namespace titan::comm {

// Runs fn(comm) on `ranks` threads, each with its rank's communicator of a fresh world, and
// returns when all have returned. When one throws, every rank still waiting in a collective or a
// recv throws too ("another rank failed"), and the first rank's own exception is rethrown here.
// `timeout_seconds` > 0: a collective that waits longer throws naming the rank and the call.
void run_threaded_ranks(int ranks, const std::function<void(Comm&)>& fn, double timeout_seconds = 0);

}  // namespace titan::comm
