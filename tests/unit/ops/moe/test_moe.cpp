// MoE block: grouped_gemm against the reference on random and odd shapes (experts with no tokens,
// k = E, expert bias, an extra router-logit gradient), bf16 compute, thread-count independence,
// finite differences of the reference backward, the aux loss gradient, the expert-bias update and
// argument errors.
#include <gtest/gtest.h>

#include <cstring>

#include "core/threading.h"
#include "moe_test_util.h"
#include "ops/registry.h"

using namespace titan;
using namespace titan::moetest;

namespace {

const MoEKernel& ref() { return kernel<MoEKernel>("reference"); }
const MoEKernel& grouped() { return kernel<MoEKernel>("grouped_gemm"); }

void expect_close(const MoEResult& a, const MoEResult& r, double tol, const std::string& what) {
  for (int64_t i = 0; i < r.saved.topk_idx.numel(); ++i)
    ASSERT_EQ(a.saved.topk_idx.data<int32_t>()[i], r.saved.topk_idx.data<int32_t>()[i]) << what;
  for (int64_t e = 0; e < r.saved.tokens_per_expert.numel(); ++e)
    EXPECT_EQ(a.saved.tokens_per_expert.data<int64_t>()[e], r.saved.tokens_per_expert.data<int64_t>()[e]) << what;
  EXPECT_LT(rel_err(a.y, r.y), tol) << what << " y";
  EXPECT_LT(rel_err(a.dx, r.dx), tol) << what << " dx";
  EXPECT_LT(rel_err(a.drouter, r.drouter), tol) << what << " drouter";
  EXPECT_LT(rel_err(a.dgate_up, r.dgate_up), tol) << what << " dgate_up";
  EXPECT_LT(rel_err(a.ddown, r.ddown), tol) << what << " ddown";
}

struct Case {
  int64_t T, H, E, I, K;
  bool norm;
};

TEST(MoEGroupedGemm, MatchesReferenceOnOddShapes) {
  const Case cases[] = {{1, 8, 4, 4, 1, true},   {7, 13, 5, 9, 2, true},   {33, 17, 9, 11, 3, false},
                        {20, 24, 16, 6, 4, true}, {5, 6, 3, 5, 3, true},     {64, 32, 8, 24, 2, false}};
  uint64_t seed = 10;
  for (const Case& c : cases)
    for (DType dt : {DType::F32, DType::BF16}) {
      const MoEProblem p = make_problem(c.T, c.H, c.E, c.I, c.K, c.norm, seed += 10);
      const std::string what = "T" + std::to_string(c.T) + " H" + std::to_string(c.H) + " E" + std::to_string(c.E) +
                               " I" + std::to_string(c.I) + " K" + std::to_string(c.K) + " " + dtype_name(dt);
      expect_close(run_moe(grouped(), p, dt), run_moe(ref(), p, dt), dt == DType::F32 ? 2e-5 : 2e-2, what);
    }
}

TEST(MoEGroupedGemm, ExpertsWithoutTokensGetZeroGradients) {
  // 3 tokens, top-1, 16 experts: at least 13 experts receive nothing.
  MoEProblem p = make_problem(3, 10, 16, 7, 1, true, 77);
  const MoEResult g = run_moe(grouped(), p), r = run_moe(ref(), p);
  expect_close(g, r, 2e-5, "sparse");
  int empty = 0;
  for (int64_t e = 0; e < 16; ++e) {
    if (g.saved.tokens_per_expert.data<int64_t>()[e] != 0) continue;
    ++empty;
    for (int64_t j = 0; j < 2 * 7 * 10; ++j) ASSERT_EQ(g.dgate_up.data<float>()[e * 140 + j], 0.f);
  }
  EXPECT_GE(empty, 13);
}

TEST(MoEGroupedGemm, ExpertBiasSteersSelectionOnly) {
  MoEProblem p = make_problem(12, 9, 6, 5, 2, true, 91);
  p.bias = Tensor::zeros({6}, DType::F32);
  p.bias.data<float>()[5] = 10.f;  // expert 5 always chosen, its weight still its own probability
  const MoEResult g = run_moe(grouped(), p), r = run_moe(ref(), p);
  expect_close(g, r, 2e-5, "bias");
  for (int64_t t = 0; t < 12; ++t) EXPECT_EQ(r.saved.topk_idx.data<int32_t>()[t * 2], 5);
  EXPECT_EQ(r.saved.tokens_per_expert.data<int64_t>()[5], 12);
  float wsum = r.saved.topk_w.data<float>()[0] + r.saved.topk_w.data<float>()[1];
  EXPECT_NEAR(wsum, 1.0, 1e-6);
}

TEST(MoEGroupedGemm, ExtraRouterLogitGradientIsAdded) {
  MoEProblem p = make_problem(9, 8, 5, 6, 2, true, 123);
  const Tensor extra = randn({9, 5}, 999);
  expect_close(run_moe(grouped(), p, DType::F32, &extra), run_moe(ref(), p, DType::F32, &extra), 2e-5, "extra");
  const MoEResult with = run_moe(ref(), p, DType::F32, &extra), without = run_moe(ref(), p);
  EXPECT_GT(rel_err(with.drouter, without.drouter), 1e-3);
}

TEST(MoEGroupedGemm, BitwiseIndependentOfThreadCount) {
  const MoEProblem p = make_problem(70, 40, 8, 24, 2, true, 5);
  const int before = num_threads();
  set_num_threads(1);
  const MoEResult one = run_moe(grouped(), p);
  set_num_threads(2);
  const MoEResult two = run_moe(grouped(), p);
  set_num_threads(before);
  for (auto [a, b] : {std::pair{&one.y, &two.y}, {&one.dx, &two.dx}, {&one.drouter, &two.drouter},
                      {&one.dgate_up, &two.dgate_up}, {&one.ddown, &two.ddown}})
    EXPECT_EQ(std::memcmp(a->raw(), b->raw(), a->nbytes()), 0);
}

// sum(y * dy) in double for the reference forward.
double loss_of(const MoEProblem& p) {
  Tensor y = Tensor::empty(p.x.shape(), DType::F32);
  MoESaved s;
  ref().forward(ExecContext::host(), p.args(), y, s);
  double l = 0;
  for (int64_t i = 0; i < y.numel(); ++i) l += double(y.data<float>()[i]) * p.dy.data<float>()[i];
  return l;
}

TEST(MoEReference, BackwardMatchesFiniteDifferences) {
  for (bool norm : {true, false}) {
    MoEProblem p = make_problem(6, 5, 4, 3, 2, norm, norm ? 300 : 400);
    const MoEResult r = run_moe(ref(), p);
    struct Param {
      Tensor* t;
      const Tensor* grad;
      const char* name;
    } params[] = {{&p.x, &r.dx, "x"}, {&p.router, &r.drouter, "router"}, {&p.gate_up, &r.dgate_up, "gate_up"},
                  {&p.down, &r.ddown, "down"}};
    for (auto& prm : params) {
      double max_g = 0;
      for (int64_t i = 0; i < prm.grad->numel(); ++i) max_g = std::max(max_g, std::fabs(double(prm.grad->data<float>()[i])));
      for (int64_t i = 0; i < prm.t->numel(); i += std::max<int64_t>(1, prm.t->numel() / 17)) {
        float* v = prm.t->data<float>() + i;
        const float orig = *v, eps = 2e-3f;
        *v = orig + eps;
        const double lp = loss_of(p);
        *v = orig - eps;
        const double lm = loss_of(p);
        *v = orig;
        const double fd = (lp - lm) / (2.0 * double(eps));
        EXPECT_NEAR(prm.grad->data<float>()[i], fd, 2e-3 * std::max(1.0, max_g)) << prm.name << " " << i << " norm " << norm;
      }
    }
  }
}

TEST(MoEAuxLoss, GradientMatchesFiniteDifferences) {
  Tensor l1 = randn({7, 5}, 50), l2 = randn({4, 5}, 51);
  Tensor d1 = Tensor::empty(l1.shape(), DType::F32), d2 = Tensor::empty(l2.shape(), DType::F32);
  std::vector<Tensor*> d = {&d1, &d2};
  moe_aux_loss({&l1, &l2}, 2, &d, 0.5f);  // scaled gradient
  for (int64_t i = 0; i < l1.numel(); ++i) {
    float* v = l1.data<float>() + i;
    const float orig = *v, eps = 1e-3f;
    *v = orig + eps;
    const double lp = moe_aux_loss({&l1, &l2}, 2);
    *v = orig - eps;
    const double lm = moe_aux_loss({&l1, &l2}, 2);
    *v = orig;
    EXPECT_NEAR(d1.data<float>()[i], 0.5 * (lp - lm) / (2e-3), 1e-4) << i;
  }
}

TEST(MoEAuxLoss, UniformRoutingGivesTopK) {
  // All logits equal: p = 1/E, counts spread evenly only if... here every row picks experts 0..K-1
  // (ties to the lower index): f = [1, 1, 0, 0] (K = 2, E = 4), P = 1/4 -> loss = 4 * 2 * 1/4 = 2.
  Tensor l = Tensor::zeros({6, 4}, DType::F32);
  EXPECT_NEAR(moe_aux_loss({&l}, 2), 2.0, 1e-12);
}

TEST(MoEExpertBias, TorchtitanSignUpdate) {
  Tensor bias = Tensor::zeros({4}, DType::F32);
  Tensor counts = Tensor::empty({4}, DType::I64);
  const int64_t c[4] = {10, 2, 4, 4};  // mean 5: signs -1, +1, +1, +1 -> delta mean 0.5e-3
  std::copy(c, c + 4, counts.data<int64_t>());
  moe_update_expert_bias(bias, counts, 1e-3f);
  EXPECT_FLOAT_EQ(bias.data<float>()[0], -1e-3f - 0.5e-3f);
  for (int e = 1; e < 4; ++e) EXPECT_FLOAT_EQ(bias.data<float>()[e], 1e-3f - 0.5e-3f);
}

TEST(MoE, RejectsBadArguments) {
  MoEProblem p = make_problem(4, 6, 3, 5, 2, true, 1);
  Tensor y = Tensor::empty({4, 6}, DType::F32);
  MoESaved s;
  for (const MoEKernel* k : {&ref(), &grouped()}) {
    MoEProblem q = p;
    q.K = 4;  // more than E
    EXPECT_THROW(k->forward(ExecContext::host(), q.args(), y, s), Error);
    q = p;
    q.down = randn({3, 6, 4}, 2);  // I mismatch
    EXPECT_THROW(k->forward(ExecContext::host(), q.args(), y, s), Error);
    Tensor bad_y = Tensor::empty({4, 5}, DType::F32);
    EXPECT_THROW(k->forward(ExecContext::host(), p.args(), bad_y, s), Error);
  }
  MoESaved none;
  Tensor dx = Tensor::empty({4, 6}, DType::F32);
  MoEGrads g;
  g.dx = &dx;
  EXPECT_THROW(grouped().backward(ExecContext::host(), p.args(), none, p.dy, g), Error);
}

}  // namespace

namespace {

TEST(MoE, PreConvertedBf16WeightsGiveTheSameBits) {
  const MoEProblem p = make_problem(19, 12, 6, 10, 2, true, 600);
  MoEProblem q = p;
  q.gate_up = p.gate_up.to(DType::BF16);
  q.down = p.down.to(DType::BF16);
  for (const MoEKernel* k : {&kernel<MoEKernel>("reference"), &kernel<MoEKernel>("grouped_gemm")}) {
    const MoEResult a = run_moe(*k, p, DType::BF16), b = run_moe(*k, q, DType::BF16);
    for (auto [x, y] : {std::pair{&a.y, &b.y}, {&a.dx, &b.dx}, {&a.drouter, &b.drouter}, {&a.dgate_up, &b.dgate_up},
                        {&a.ddown, &b.ddown}})
      EXPECT_EQ(std::memcmp(x->raw(), y->raw(), x->nbytes()), 0) << k->variant;
    Tensor y = Tensor::empty(p.x.shape(), DType::F32);
    MoESaved s;
    EXPECT_THROW(k->forward(ExecContext::host(), q.args(DType::F32), y, s), Error);  // bf16 weights need bf16 compute
  }
}

}  // namespace
