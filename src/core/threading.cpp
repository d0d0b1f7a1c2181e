#include "core/threading.h"

#include <omp.h>

#include <thread>

namespace titan {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  if (n <= 0) n = int(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  omp_set_num_threads(n);
}

}  // namespace titan
