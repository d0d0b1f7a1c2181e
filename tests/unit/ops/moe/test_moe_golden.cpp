// The MoE block against transformers' Qwen3MoeSparseMoeBlock (tools/oracle/moe_goldens.py):
// output, router logits, selected experts (ties included), gradients of x, router and experts,
// and load_balancing_loss_func with its gradient, for both variants.
#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "moe_test_util.h"
#include "ops/registry.h"

using namespace titan;
using namespace titan::moetest;

namespace {

std::string path(const std::string& name) { return std::string(TITAN_FIXTURES) + "/moe/" + name + ".safetensors"; }

class MoEGolden : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(MoEGolden, MatchesTransformers) {
  const auto& [name, variant] = GetParam();
  const SafetensorsFile f = SafetensorsFile::open(path(name));
  auto g = [&](const std::string& n) { return f.get(n, n == "topk_idx" ? DType::I64 : DType::F32); };
  MoEProblem p;
  p.x = g("x"), p.router = g("router"), p.gate_up = g("gate_up"), p.down = g("down"), p.dy = g("dy");
  p.K = std::stoll(f.metadata().at("top_k"));
  p.norm = f.metadata().at("norm_topk_prob") == "1";
  const MoEResult r = run_moe(kernel<MoEKernel>(variant), p);
  const Tensor idx = g("topk_idx");
  for (int64_t i = 0; i < idx.numel(); ++i)
    ASSERT_EQ(r.saved.topk_idx.data<int32_t>()[i], idx.data<int64_t>()[i]) << name << " slot " << i;
  EXPECT_LT(rel_err(r.saved.logits, g("logits")), 1e-5) << name;
  EXPECT_LT(rel_err(r.y, g("y")), 1e-5) << name;
  EXPECT_LT(rel_err(r.dx, g("dx")), 1e-5) << name;
  EXPECT_LT(rel_err(r.drouter, g("drouter")), 1e-4) << name;
  EXPECT_LT(rel_err(r.dgate_up, g("dgate_up")), 1e-5) << name;
  EXPECT_LT(rel_err(r.ddown, g("ddown")), 1e-5) << name;
}

INSTANTIATE_TEST_SUITE_P(All, MoEGolden,
                         ::testing::Combine(::testing::Values("basic", "nonorm_k3", "tie", "one_expert_k1"),
                                            ::testing::Values("reference", "grouped_gemm")));

TEST(MoEGoldenTie, FixtureHasATieThatTorchTopkBreaksDifferently) {
  // Guards the point of the tie case: without the pinned rule the selection would differ.
  const SafetensorsFile f = SafetensorsFile::open(path("tie"));
  EXPECT_EQ(f.metadata().at("native_topk_agrees"), "0");
}

TEST(MoEAuxLoss, MatchesTransformersLoadBalancingLoss) {
  for (const char* name : {"basic", "nonorm_k3", "tie", "one_expert_k1"}) {
    const SafetensorsFile f = SafetensorsFile::open(path(name));
    const Tensor l1 = f.get("logits", DType::F32), l2 = f.get("logits2", DType::F32);
    Tensor d1 = Tensor::empty(l1.shape(), DType::F32), d2 = Tensor::empty(l2.shape(), DType::F32);
    std::vector<Tensor*> d = {&d1, &d2};
    const double loss = moe_aux_loss({&l1, &l2}, std::stoll(f.metadata().at("top_k")), &d);
    EXPECT_NEAR(loss, f.get("aux", DType::F32).data<float>()[0], 1e-5) << name;
    EXPECT_LT(rel_err(d1, f.get("daux_logits", DType::F32)), 1e-5) << name;
    EXPECT_LT(rel_err(d2, f.get("daux_logits2", DType::F32)), 1e-5) << name;
  }
}

}  // namespace
