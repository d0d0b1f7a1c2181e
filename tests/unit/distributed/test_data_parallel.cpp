// DataParallel (replicated): after the reduction every rank holds the gradient one process would
// compute, summed over ranks in rank order (sharded: test_fsdp.cpp). Runs
// as one process (ctest "distributed") and with 2 and 3 ranks under mpirun (tests/cli/dist_comm.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "comm/comm.h"
#include "unit/distributed/dist_test_util.h"
#include "distributed/data_parallel.h"
#include "ops/registry.h"

using namespace titan;
using namespace titan::distributed;

namespace {

// Three parameters of sizes that do not divide evenly by 2 or 3 ranks.
const std::vector<Shape> kShapes = {{5, 3}, {7}, {2, 11}};

float init_value(size_t p, int64_t i) { return 0.1f * float(p + 1) - 0.01f * float(i % 13); }
float grad_of(int rank, size_t p, int64_t i) { return 0.05f * float((i * 3 + int64_t(p) * 5 + rank * 7) % 17) - 0.4f; }

ParamStore make_store(int rank) {
  ParamStore ps;
  for (size_t p = 0; p < kShapes.size(); ++p) {
    Tensor v = Tensor::zeros(kShapes[p], DType::F32), g = Tensor::zeros(kShapes[p], DType::F32);
    for (int64_t i = 0; i < v.numel(); ++i) {
      v.data<float>()[i] = init_value(p, i);
      g.data<float>()[i] = grad_of(rank, p, i);
    }
    ps.add("p" + std::to_string(p), v, g);
  }
  return ps;
}

// One process's view: gradient summed over `world` ranks in rank order.
ParamStore summed_store(int world) {
  ParamStore ps = make_store(0);
  for (size_t p = 0; p < kShapes.size(); ++p)
    for (int64_t i = 0; i < ps.all()[p].grad.numel(); ++i)
      for (int q = 1; q < world; ++q) ps.all()[p].grad.data<float>()[i] += grad_of(q, p, i);
  return ps;
}

}  // namespace

TEST(DataParallel, ReplicateSumsGradients) {
  Comm& c = test_comm();
  ParamStore ps = make_store(c.rank());
  DataParallel dp(ps, c);
  dp.all_reduce_grads();
  ParamStore want = summed_store(c.size());
  for (size_t p = 0; p < kShapes.size(); ++p)
    for (int64_t i = 0; i < want.all()[p].grad.numel(); ++i)
      ASSERT_EQ(ps.all()[p].grad.data<float>()[i], want.all()[p].grad.data<float>()[i]) << p << " " << i;
}
