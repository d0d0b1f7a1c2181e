// The Qwen3-MoE model against transformers' goldens (tools/oracle/qwen3_moe_goldens.py): logits,
// loss (with the router auxiliary loss when the config's output_router_logits is true) and the
// gradient of every parameter under its per-expert HF name, for the reference kernel set (MoE
// reference loop) and the cpu set (MoE token permutation + grouped GEMM).
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/token_lines.h"
#include "model/hf_model.h"
#include "util/strings.h"
#include "unit/model/golden_check.h"

using namespace titan;

namespace {

struct Case {
  std::string name, kernels;
};

std::string fixture(const std::string& name) { return std::string(TITAN_FIXTURES) + "/qwen3_moe/" + name; }

class MoEGolden : public ::testing::TestWithParam<Case> {};

TEST_P(MoEGolden, LogitsLossAndGradientsMatchTransformers) {
  const Case& c = GetParam();
  const std::string dir = fixture(c.name);
  auto model = load_hf_model(dir, c.kernels);
  ASSERT_TRUE(model->config().is_moe());
  Tensor ids = read_token_lines(dir + "/tokens.txt");
  Tensor labels = next_token_labels(ids);
  const int64_t count = count_labels(labels);
  auto golden = SafetensorsFile::open(dir + "/golden.safetensors");
  auto meta = nlohmann::json::parse(read_file(dir + "/golden.json"));
  const double want_loss = meta["loss"].get<double>();
  const bool aux_on = meta["output_router_logits"].get<bool>();
  ASSERT_EQ(model->config().output_router_logits, aux_on);
  // The fixtures are chosen so that the aux term is visible at the test's tolerance.
  if (aux_on) {
    ASSERT_GT(meta["loss"].get<double>() - meta["loss_ce"].get<double>(), 1e-2);
  }

  const int64_t N = ids.numel(), V = model->config().vocab_size;
  Tensor logits = Tensor::empty({N, V}, DType::F32);
  double loss = model->forward(ids, labels, &logits) / double(count);
  EXPECT_NEAR(loss, want_loss, 1e-5);
  if (aux_on) {
    EXPECT_NEAR(model->last_aux_loss(), meta["aux_loss"].get<double>(), 1e-5);
  }
  Tensor gl = golden.get("logits", DType::F32);
  ASSERT_EQ(gl.numel(), logits.numel());
  const double max_abs = titan::testing::max_abs_diff(gl, logits);
  EXPECT_LE(max_abs, 1e-4) << "logits max abs diff";

  model->params().zero_grad();
  double loss2 = model->forward_backward(ids, labels, float(1.0 / double(count))) / double(count);
  EXPECT_NEAR(loss2, want_loss, 1e-5);
  size_t n_expert_params = 0;
  for (auto& p : model->params().all()) {
    SCOPED_TRACE(p.name);
    n_expert_params += p.name.find(".mlp.experts.") != std::string::npos;
    ASSERT_TRUE(golden.contains(p.name));
    Tensor g = golden.get(p.name, DType::F32);
    ASSERT_EQ(g.shape(), p.grad.shape());
    EXPECT_LE(titan::testing::max_diff_rel_to_peak(g, p.grad), 1e-3);
  }
  const ModelConfig& mc = model->config();
  EXPECT_EQ(n_expert_params, size_t(3 * mc.num_experts * mc.num_sparse_layers()));
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const char* n : {"aux_norm", "noaux_nonorm_tied", "step2_mlponly"})
    for (const char* k : {"reference", "cpu"}) v.push_back({n, k});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Qwen3Moe, MoEGolden, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name + "_" + info.param.kernels; });

// Activation checkpointing recomputes the routing in backward: gradients (aux loss included) must
// not change.
TEST(Qwen3MoeCheckpointing, FullAndSelectiveGiveTheSameGradients) {
  const std::string dir = fixture("aux_norm");
  Tensor ids = read_token_lines(dir + "/tokens.txt");
  Tensor labels = next_token_labels(ids);
  std::vector<std::vector<float>> grads;
  std::vector<double> losses;
  for (Checkpointing ck : {Checkpointing::None, Checkpointing::Selective, Checkpointing::Full}) {
    auto model = load_hf_model(dir, "cpu");
    model->set_checkpointing(ck);
    model->params().zero_grad();
    losses.push_back(model->forward_backward(ids, labels, 0.1f));
    std::vector<float> g;
    for (auto& p : model->params().all())
      for (int64_t i = 0; i < p.grad.numel(); ++i) g.push_back(p.grad.data<float>()[i]);
    grads.push_back(std::move(g));
  }
  for (size_t i = 1; i < grads.size(); ++i) {
    EXPECT_EQ(losses[i], losses[0]);
    EXPECT_EQ(grads[i], grads[0]);
  }
}

}  // namespace

// bf16 expert GEMMs (router kept in f32, so routing matches on these fixtures): close to the f32
// oracle within bf16 rounding, for both MoE variants.
TEST(Qwen3MoeBf16, MixedPrecisionStaysCloseToTheF32Oracle) {
  for (const char* kernels : {"reference", "cpu"}) {
    SCOPED_TRACE(kernels);
    titan::testing::expect_bf16_close_to_golden(fixture("aux_norm"), kernels);
  }
}
