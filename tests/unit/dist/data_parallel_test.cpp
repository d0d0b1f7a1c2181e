// DataParallel: after a step every rank holds the parameters one process would compute from the
// summed gradient (clip + AdamW per parameter), for replicated and sharded optimizer state. Runs
// as one process (ctest "dist") and with 2 and 3 ranks under mpirun (tests/cli/dist_comm.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dist/comm.h"
#include "dist/data_parallel.h"
#include "ops/registry.h"

using namespace titan;
using namespace titan::dist;

namespace {

Comm& the_comm() {
  static std::unique_ptr<Comm> c = make_comm();
  return *c;
}

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
  Comm& c = the_comm();
  ParamStore ps = make_store(c.rank());
  DataParallel dp(ps, c, DataParallel::Mode::Replicate);
  EXPECT_EQ(dp.optimizer_bytes(), 0);
  dp.all_reduce_grads();
  ParamStore want = summed_store(c.size());
  for (size_t p = 0; p < kShapes.size(); ++p)
    for (int64_t i = 0; i < want.all()[p].grad.numel(); ++i)
      ASSERT_EQ(ps.all()[p].grad.data<float>()[i], want.all()[p].grad.data<float>()[i]) << p << " " << i;
}

TEST(DataParallel, ShardStepMatchesOneProcess) {
  Comm& c = the_comm();
  const AdamWKernel& adamw = kernel<AdamWKernel>("cpu");
  AdamWParams hp;
  hp.lr = 0.01f;
  hp.weight_decay = 0.1f;
  ParamStore ps = make_store(c.rank());
  DataParallel dp(ps, c, DataParallel::Mode::Shard);
  const int64_t total = 15 + 7 + 22;
  EXPECT_EQ(dp.total(), total);
  EXPECT_EQ(dp.chunk(), (total + c.size() - 1) / c.size());
  EXPECT_EQ(dp.optimizer_bytes(), 2 * dp.chunk() * 4);  // 1/N of the moments

  ParamStore want = summed_store(c.size());
  std::vector<Tensor> m, v;
  for (auto& p : want.all()) {
    m.push_back(Tensor::zeros(p.value.shape(), DType::F32));
    v.push_back(Tensor::zeros(p.value.shape(), DType::F32));
  }
  for (int step = 1; step <= 2; ++step) {
    hp.step = step;
    if (step == 2) {  // fresh local gradients for the second step
      ParamStore g = make_store(c.rank());
      for (size_t p = 0; p < kShapes.size(); ++p) ps.all()[p].grad.copy_(g.all()[p].grad);
      ParamStore gs = summed_store(c.size());
      for (size_t p = 0; p < kShapes.size(); ++p) want.all()[p].grad.copy_(gs.all()[p].grad);
    }
    // One process: norm, clip at 1.0, AdamW per parameter.
    double ss = 0;
    for (auto& p : want.all())
      for (int64_t i = 0; i < p.grad.numel(); ++i) ss += double(p.grad.data<float>()[i]) * p.grad.data<float>()[i];
    const double norm_want = std::sqrt(ss);
    const float coef = float(1.0 / (norm_want + 1e-6));
    for (size_t p = 0; p < want.all().size(); ++p) {
      for (int64_t i = 0; i < want.all()[p].grad.numel(); ++i) want.all()[p].grad.data<float>()[i] *= coef;
      adamw.step(want.all()[p].value, want.all()[p].grad, m[p], v[p], hp);
    }
    const double norm = dp.shard_step(1.0, adamw, hp);
    EXPECT_NEAR(norm, norm_want, 1e-9 * norm_want);
    for (size_t p = 0; p < kShapes.size(); ++p)
      for (int64_t i = 0; i < want.all()[p].value.numel(); ++i)
        ASSERT_NEAR(ps.all()[p].value.data<float>()[i], want.all()[p].value.data<float>()[i], 1e-6f)
            << "step " << step << " param " << p << " element " << i;
  }
  // The gathered moments are the one-process moments; scattering them back restores the chunk.
  std::vector<Tensor> gm, gv;
  dp.gather_moments(&gm, &gv);
  for (size_t p = 0; p < kShapes.size(); ++p)
    for (int64_t i = 0; i < m[p].numel(); ++i) {
      ASSERT_NEAR(gm[p].data<float>()[i], m[p].data<float>()[i], 1e-7f);
      ASSERT_NEAR(gv[p].data<float>()[i], v[p].data<float>()[i], 1e-7f);
    }
  std::vector<float> before(dp.exp_avg().data<float>(), dp.exp_avg().data<float>() + dp.chunk());
  dp.scatter_moments(gm, gv);
  for (int64_t i = 0; i < dp.chunk(); ++i) ASSERT_EQ(dp.exp_avg().data<float>()[i], before[size_t(i)]);
}
