#include "core/threading.h"

#include <omp.h>

#include <algorithm>
#include <thread>

#include "core/error.h"

namespace titan {

int num_threads() { return omp_get_max_threads(); }

static int hardware_threads() { return std::max(1, int(std::thread::hardware_concurrency())); }

int max_num_threads() { return std::max(1024, 8 * hardware_threads()); }

void set_num_threads(int n) {
  // OpenMP accepts any count and fails only later, when a parallel region cannot create the
  // threads (libgomp aborts the process); refuse here, where the cause is still known.
  TITAN_CHECK(n <= max_num_threads(), "thread count ", n, " is too large: at most ", max_num_threads(),
              " threads (this machine has ", hardware_threads(), "; 0 means all of them)");
  if (n <= 0) n = hardware_threads();
  omp_set_num_threads(n);
}

}  // namespace titan
