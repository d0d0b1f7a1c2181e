// LoRA dropout (model/lora.h): PEFT's lora_B(lora_A(dropout(x))) * scale. PyTorch's RNG is not
// reproduced; instead: the mask is a pure function of (seed, step, adapter, global sample,
// position, feature) — the same for any thread count and any split of the batch over ranks or
// micro-batches —, kept elements are scaled by 1 / (1 - p) and about 1 - p of them are kept, the
// backward is the derivative of the forward with that mask (central differences, exact up to
// rounding since the adapter is linear in each of x, A and B), and a model's training pass uses it
// while scoring does not.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/threading.h"
#include "model/decoder.h"
#include "ops/matmul/matmul.h"
#include "ops/registry.h"
#include "common/test_util.h"

using namespace titan;
using titan::test::randn;

namespace {

LoraDropout drop(float p, int64_t step, int64_t row0, int64_t seq, const std::string& module = "m.q_proj") {
  LoraDropout d;
  d.p = p, d.rng = lora_dropout_rng(1234, module, step), d.row0 = row0, d.seq = seq;
  return d;
}

Tensor dropped(const LoraDropout& d, const Tensor& x) {
  Tensor out;
  lora_dropout_forward(d, x, out);
  return out;
}

bool equal(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.raw(), b.raw(), size_t(a.nbytes())) == 0;
}

}  // namespace

TEST(LoraDropout, MaskIsDeterministicScaledAndKeepsOneMinusP) {
  const int64_t seq = 16, rows = 8, in = 96;
  const float p = 0.3f;
  Tensor ones = Tensor::empty({rows * seq, in}, DType::F32);
  for (int64_t i = 0; i < ones.numel(); ++i) ones.data<float>()[i] = 1.f;
  const LoraDropout d = drop(p, 5, 0, seq);
  Tensor a = dropped(d, ones), b = dropped(d, ones);
  EXPECT_TRUE(equal(a, b));
  int64_t kept = 0;
  double sum = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const float v = a.data<float>()[i];
    ASSERT_TRUE(v == 0.f || v == 1.f / (1.f - p)) << v;  // kept elements scaled by 1 / (1 - p)
    kept += v != 0.f;
    sum += v;
  }
  const double n = double(a.numel()), frac = double(kept) / n;
  // Binomial(n, 0.7): 5 standard deviations.
  EXPECT_NEAR(frac, 1.0 - p, 5 * std::sqrt(p * (1 - p) / n));
  EXPECT_NEAR(sum / n, 1.0, 5 * std::sqrt(p * (1 - p) / n) / (1 - p));  // E[dropout(x)] = x
  // Another step, another adapter, another seed: other masks.
  EXPECT_FALSE(equal(a, dropped(drop(p, 6, 0, seq), ones)));
  EXPECT_FALSE(equal(a, dropped(drop(p, 5, 0, seq, "m.k_proj"), ones)));
  LoraDropout other = d;
  other.rng.seed = 99;
  EXPECT_FALSE(equal(a, dropped(other, ones)));
}

TEST(LoraDropout, SameMaskForAnyThreadCountAndBatchSplit) {
  const int64_t seq = 12, rows = 6, in = 40;
  Tensor x = randn({rows * seq, in}, 3);
  const LoraDropout d = drop(0.25f, 2, 0, seq);
  const int before = num_threads();
  set_num_threads(1);
  Tensor one = dropped(d, x);
  set_num_threads(std::max(2, before));
  Tensor many = dropped(d, x);
  set_num_threads(before);
  EXPECT_TRUE(equal(one, many));
  // The rows split as ranks / micro-batches split them: rows [2, 6) called with row0 = 2 get the
  // masks they get inside the whole batch.
  Tensor tail = x.slice0(2 * seq, rows * seq).clone();
  Tensor part = dropped(drop(0.25f, 2, 2, seq), tail);
  EXPECT_TRUE(equal(part, one.slice0(2 * seq, rows * seq).clone()));
}

TEST(LoraDropout, BackwardIsTheForwardsDerivativeWithTheSameMask) {
  const int64_t T = 10, in = 24, out = 18, r = 4;
  const float scale = 1.5f;
  const GemmKernel& gk = kernel<GemmKernel>("cpu");
  Tensor x = randn({T, in}, 11), A = randn({r, in}, 12, 0.3), B = randn({out, r}, 13, 0.3);
  Tensor w = randn({T, out}, 14);  // L = sum(w * y)
  const LoraDropout d = drop(0.4f, 1, 3, 5);
  auto loss = [&](const Tensor& xx, const Tensor& AA, const Tensor& BB) {
    Tensor y = Tensor::zeros({T, out}, DType::F32), t;
    lora_forward(ExecContext::host(), gk, AA, BB, scale, xx, t, y.data<float>(), out, DType::F32, &d);
    double s = 0;
    for (int64_t i = 0; i < y.numel(); ++i) s += double(w.data<float>()[i]) * y.data<float>()[i];
    return s;
  };
  Tensor t;
  lora_forward(ExecContext::host(), gk, A, B, scale, x, t, nullptr, 0, DType::F32, &d);
  Tensor dx = Tensor::zeros({T, in}, DType::F32), gA = Tensor::zeros(A.shape(), DType::F32),
         gB = Tensor::zeros(B.shape(), DType::F32);
  lora_backward(ExecContext::host(), gk, A, B, scale, x, t, w.raw(), out, DType::F32, dx, gA, gB, DType::F32, &d);
  int64_t zero_dx = 0;
  for (int64_t i = 0; i < dx.numel(); ++i) zero_dx += dx.data<float>()[i] == 0.f;
  EXPECT_GT(zero_dx, 0);  // dropped inputs get no gradient
  const double h = 1e-2;
  auto check = [&](Tensor& param, const Tensor& grad, const char* what) {
    double worst = 0, peak = 0;
    for (int64_t i = 0; i < param.numel(); ++i) {
      float& v = param.data<float>()[i];
      const float keep = v;
      v = keep + float(h);
      const double up = loss(x, A, B);
      v = keep - float(h);
      const double down = loss(x, A, B);
      v = keep;
      const double fd = (up - down) / (2 * h);
      worst = std::max(worst, std::fabs(fd - grad.data<float>()[i]));
      peak = std::max(peak, std::fabs(fd));
    }
    EXPECT_LE(worst, 2e-3 * peak) << what << ": worst " << worst << " of peak " << peak;
  };
  check(x, dx, "dx");
  check(A, gA, "dA");
  check(B, gB, "dB");
}

TEST(LoraDropout, TrainingPassDropsAndScoringDoesNot) {
  ModelConfig c = flavor_config("debug-tiny");
  c.num_hidden_layers = 1;
  DecoderModel m(c, "cpu", false, /*frozen=*/true);
  m.init_weights(InitScheme::Torchtitan, 1);
  LoraConfig lc;
  lc.rank = 4, lc.alpha = 8, lc.dropout = 0.5;
  lc.target_modules = {"model.layers.*.self_attn.q_proj", "model.layers.*.mlp.down_proj"};
  m.enable_lora(lc, 7);
  for (auto& p : m.lora_params().all()) p.value.copy_(randn(p.value.shape(), 21, 0.2));
  const int64_t S = 16;
  Tensor ids = Tensor::empty({2, S}, DType::I64), labels = Tensor::empty({2, S}, DType::I64);
  for (int64_t i = 0; i < 2 * S; ++i) ids.data<int64_t>()[i] = (i * 37 + 5) % c.vocab_size;
  for (int64_t i = 0; i < 2 * S; ++i) labels.data<int64_t>()[i] = (i * 53 + 1) % c.vocab_size;
  auto grads = [&](int64_t step) {
    m.lora_params().zero_grad();
    m.set_lora_dropout_rows(step, 0);
    const double l = m.forward_backward(ids, labels, 1.f);
    std::vector<float> g;
    for (auto& p : m.lora_params().all()) g.insert(g.end(), p.grad.data<float>(), p.grad.data<float>() + p.grad.numel());
    return std::make_pair(l, g);
  };
  const double eval1 = m.forward(ids, labels), eval2 = m.forward(ids, labels);
  EXPECT_EQ(eval1, eval2);  // scoring: no dropout
  auto [l1, g1] = grads(1);
  auto [l1b, g1b] = grads(1);
  auto [l2, g2] = grads(2);
  EXPECT_EQ(l1, l1b);  // the same step: the same masks
  EXPECT_EQ(g1, g1b);
  EXPECT_NE(l1, eval1);  // training drops
  EXPECT_NE(l1, l2);     // another step, other masks
  EXPECT_EQ(m.forward(ids, labels), eval1);  // and scoring after training still does not
  // Activation checkpointing recomputes the layer with the same masks.
  m.set_checkpointing(Checkpointing::Full);
  auto [lc1, gc1] = grads(1);
  EXPECT_EQ(lc1, l1);
  EXPECT_EQ(gc1, g1);
}
