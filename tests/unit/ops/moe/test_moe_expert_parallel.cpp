// Expert parallelism (ops/moe/expert_parallel.h) on threaded ranks: each rank routes its own
// tokens and holds E / ep experts; its outputs and input gradients equal the single-process
// grouped-GEMM variant's rows for its tokens, the router gradients summed over the ranks equal
// one process's, and each owner's expert gradients equal one process's for its experts: with even
// and skewed routing (owners and experts that receive no rows at all), biased routing,
// unnormalized weights, f32 and bf16.
#include <gtest/gtest.h>

#include <mutex>

#include "comm/thread_comm.h"
#include "ops/moe/expert_parallel.h"
#include "ops/registry.h"
#include "moe_test_util.h"

namespace titan {
namespace {

using moetest::MoEProblem;
using moetest::MoEResult;

struct Case {
  int64_t T, H, E, I, K, ep;
  bool norm = true, bias = false, skew = false;
  DType compute = DType::F32;
};

void check_against_one_process(const Case& c) {
  MoEProblem p = moetest::make_problem(c.T, c.H, c.E, c.I, c.K, c.norm, 11);
  if (c.bias) p.bias = test::randn({c.E}, 5, 0.05);
  if (c.skew) {  // expert 3 takes every token's first choice: the other owners get (almost) nothing
    float* r = p.router.data<float>();
    float* x = p.x.data<float>();
    for (int64_t t = 0; t < c.T; ++t) x[t * c.H] = 4.0f;  // a shared positive feature
    for (int64_t h = 0; h < c.H; ++h) r[3 * c.H + h] = h == 0 ? 5.0f : 0.0f;
  }
  const MoEResult want = moetest::run_moe(kernel<MoEKernel>("grouped_gemm"), p, c.compute);
  const double tol = c.compute == DType::BF16 ? 1e-4 : 1e-5;
  const int64_t Tl = c.T / c.ep, El = c.E / c.ep;
  Tensor drouter_sum = Tensor::zeros(p.router.shape(), DType::F32);
  std::mutex mu;
  comm::run_threaded_ranks(int(c.ep), [&](comm::Comm& ep) {
    const int64_t r = ep.rank();
    Tensor x = p.x.slice0(r * Tl, (r + 1) * Tl), dy = p.dy.slice0(r * Tl, (r + 1) * Tl);
    Tensor gu = p.gate_up.slice0(r * El, (r + 1) * El), dn = p.down.slice0(r * El, (r + 1) * El);
    MoEArgs a = p.args(c.compute);
    a.x = &x, a.gate_up = &gu, a.down = &dn;
    Tensor y = Tensor::empty(x.shape(), DType::F32), dx = Tensor::empty(x.shape(), DType::F32);
    Tensor drouter = Tensor::zeros(p.router.shape(), DType::F32);
    Tensor dgu = Tensor::zeros(gu.shape(), DType::F32), ddn = Tensor::zeros(dn.shape(), DType::F32);
    MoESaved s;
    moe_ep_forward(ExecContext::host(), a, ep, y, s);
    MoEGrads g;
    g.dx = &dx, g.drouter = &drouter, g.dgate_up = &dgu, g.ddown = &ddn;
    moe_ep_backward(ExecContext::host(), a, ep, s, dy, g);
    std::lock_guard<std::mutex> lock(mu);
    if (c.skew && c.K == 1) {  // every row went to expert 3's owner (rank 1 of 4)
      int64_t received = 0;
      for (int64_t i = 0; i < s.ep_counts.numel(); ++i) received += s.ep_counts.data<int64_t>()[i];
      EXPECT_EQ(received, r == 1 ? c.T : 0) << "rows received by rank " << r;
    }
    EXPECT_LT(test::rel_err(y, want.y.slice0(r * Tl, (r + 1) * Tl)), tol) << "y rank " << r;
    EXPECT_LT(test::rel_err(dx, want.dx.slice0(r * Tl, (r + 1) * Tl)), tol) << "dx rank " << r;
    EXPECT_LT(test::rel_err(dgu, want.dgate_up.slice0(r * El, (r + 1) * El)), tol) << "dgate_up rank " << r;
    EXPECT_LT(test::rel_err(ddn, want.ddown.slice0(r * El, (r + 1) * El)), tol) << "ddown rank " << r;
    float* acc = drouter_sum.data<float>();
    for (int64_t i = 0; i < drouter.numel(); ++i) acc[i] += drouter.data<float>()[i];
  });
  EXPECT_LT(test::rel_err(drouter_sum, want.drouter), tol) << "drouter";
}

TEST(MoEExpertParallel, Ep2MatchesOneProcess) { check_against_one_process({48, 16, 8, 12, 2, 2}); }
TEST(MoEExpertParallel, Ep4MatchesOneProcess) { check_against_one_process({64, 16, 8, 12, 2, 4}); }
TEST(MoEExpertParallel, BiasAndUnnormalizedWeights) {
  Case c{48, 16, 8, 12, 3, 2};
  c.norm = false, c.bias = true;
  check_against_one_process(c);
}
TEST(MoEExpertParallel, SkewedRoutingLeavesOwnersEmpty) {
  Case c{32, 16, 8, 12, 1, 4};
  c.skew = true;
  check_against_one_process(c);
  c.K = 2;
  check_against_one_process(c);
}
TEST(MoEExpertParallel, Bf16Compute) {
  Case c{48, 16, 8, 12, 2, 2};
  c.compute = DType::BF16;
  check_against_one_process(c);
}

TEST(MoEExpertParallel, RefusesExpertsThatDoNotDivide) {
  MoEProblem p = moetest::make_problem(8, 8, 6, 4, 2, true, 3);
  comm::run_threaded_ranks(4, [&](comm::Comm& ep) {
    MoEArgs a = p.args();
    Tensor y = Tensor::empty(p.x.shape(), DType::F32);
    MoESaved s;
    try {
      moe_ep_forward(ExecContext::host(), a, ep, y, s);
      ADD_FAILURE() << "6 experts over 4 ranks accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("6 experts do not divide over 4"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace titan
