// LoRA on MoE parameters (model/lora.h, PEFT's target_parameters) without the oracle: the forward
// equals the base with W_e + scale * B_e A_e written into its per-expert weights by a naive loop
// over PEFT's layout (A [E*r, in] expert-major rows, B [out, r*E] rank-major columns); every
// adapter gradient equals central differences of the loss; activation checkpointing recomputes
// the same gradients; merge_lora gives the adapted model's logits; a PEFT folder written here
// reads back with the same values under PEFT's wrapper names; bad targets are one-line errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "lora_fd_check.h"
#include "io/safetensors.h"
#include "io/token_lines.h"
#include "model/hf_model.h"
#include "model/peft_adapter.h"
#include "unit/model/golden_check.h"

using namespace titan;

namespace {

const std::string kBase = std::string(TITAN_FIXTURES) + "/qwen3_moe/aux_norm";
const std::string kAdapter = std::string(TITAN_FIXTURES) + "/lora/moe_experts_router/adapter";

std::unique_ptr<DecoderModel> adapted(const std::string& kernels = "cpu") {
  auto m = load_hf_model(kBase, kernels);
  load_peft_adapter(*m, kAdapter);
  m->freeze_base();
  return m;
}

Tensor logits_of(DecoderModel& m, const Tensor& ids, const Tensor& labels) {
  Tensor logits = Tensor::empty({ids.numel(), m.config().vocab_size}, DType::F32);
  m.forward(ids, labels, &logits);
  return logits;
}

const Tensor& lora_value(DecoderModel& m, const std::string& name) {
  for (auto& p : m.lora_params().all())
    if (p.name == name) return p.value;
  ADD_FAILURE() << "no adapter tensor " << name;
  static Tensor none;
  return none;
}

// W[o, i] += scale * sum_j B[o, j*E + e] A[e*r + j, i] for rows [row0, row0 + rows) of expert e's
// [out, in] delta, written into w (a [rows, in] HF weight).
void naive_add(Tensor& w, const Tensor& A, const Tensor& B, int64_t E, int64_t e, int64_t row0, float scale) {
  const int64_t r = A.dim(0) / E, in = A.dim(1), rows = w.dim(0);
  for (int64_t o = 0; o < rows; ++o)
    for (int64_t i = 0; i < in; ++i) {
      double d = 0;
      for (int64_t j = 0; j < r; ++j)
        d += double(B.data<float>()[(row0 + o) * r * E + j * E + e]) * A.data<float>()[(e * r + j) * in + i];
      w.data<float>()[o * in + i] += float(scale * d);
    }
}

}  // namespace

TEST(LoraMoe, ForwardEqualsNaiveMergeInPeftLayout) {
  Tensor ids = read_token_lines(kBase + "/tokens.txt");
  Tensor labels = next_token_labels(ids);
  auto m = adapted();
  const Tensor want = logits_of(*m, ids, labels);
  auto plain = load_hf_model(kBase, "cpu");
  const float scale = float(m->lora_config().scale());
  const int64_t E = m->config().num_experts, I = m->config().moe_intermediate_size;
  int64_t merged = 0;
  for (const LoraAdapter& a : m->lora_adapters()) {
    if (!a.is_parameter()) continue;
    const Tensor& A = lora_value(*m, lora_a_name(a.module));
    const Tensor& B = lora_value(*m, lora_b_name(a.module));
    const std::string p = "model.layers." + std::to_string(a.layer) + ".mlp.";
    if (a.group == LoraGroup::Router) {
      naive_add(plain->params().at(p + "gate.weight").value, A, B, 1, 0, 0, scale);
    } else {
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = p + "experts." + std::to_string(e) + ".";
        if (a.group == LoraGroup::ExpertGateUp) {
          naive_add(plain->params().at(x + "gate_proj.weight").value, A, B, E, e, 0, scale);
          naive_add(plain->params().at(x + "up_proj.weight").value, A, B, E, e, I, scale);
        } else {
          naive_add(plain->params().at(x + "down_proj.weight").value, A, B, E, e, 0, scale);
        }
      }
    }
    ++merged;
  }
  EXPECT_EQ(merged, 5);  // layer 0: router, gate_up, down; layer 1: router, gate_up
  // q_proj's adapters are ordinary LoRA: merge them on both sides the same way.
  Tensor got;
  {
    // the plain model still lacks q_proj's delta: give it only those adapters and merge them
    LoraConfig c = m->lora_config();
    c.target_parameters.clear();
    c.target_modules = {"model.layers.*.self_attn.q_proj"};
    plain->enable_lora(c, 0);
    for (auto& p : plain->lora_params().all()) p.value.copy_(lora_value(*m, p.name));
    plain->merge_lora();
    got = logits_of(*plain, ids, labels);
  }
  const double diff = titan::testing::max_abs_diff(want, got);
  std::printf("adapted vs naive merge: logits max abs diff %.2e\n", diff);
  EXPECT_LE(diff, 1e-5);
  // and merge_lora of every adapter gives the same model
  m->merge_lora();
  EXPECT_FALSE(m->lora_enabled());
  EXPECT_LE(titan::testing::max_abs_diff(want, logits_of(*m, ids, labels)), 1e-5);
}

TEST(LoraMoe, AdapterGradientsEqualCentralDifferences) {
  Tensor ids = read_token_lines(kBase + "/tokens.txt");
  Tensor labels = next_token_labels(ids);
  const double count = double(count_labels(labels));
  for (const char* kernels : {"reference", "cpu"}) {
    SCOPED_TRACE(kernels);
    auto m = adapted(kernels);
    m->lora_params().zero_grad();
    m->forward_backward(ids, labels, float(1.0 / count));
    double worst = 0;
    for (auto& p : m->lora_params().all()) {
      if (p.name.find("q_proj") != std::string::npos) continue;  // dense LoRA: tested elsewhere
      SCOPED_TRACE(p.name);
      worst = std::max(worst, test::adapter_grad_vs_central_difference(*m, p, ids, labels, count, 1e-2, 6));
    }
    std::printf("%s: worst |grad - central difference| / peak %.2e\n", kernels, worst);
  }
}

TEST(LoraMoe, CheckpointingRecomputesTheSameGradients) {
  Tensor ids = read_token_lines(kBase + "/tokens.txt");
  Tensor labels = next_token_labels(ids);
  std::vector<std::vector<float>> ref;
  for (Checkpointing ck : {Checkpointing::None, Checkpointing::Selective, Checkpointing::Full}) {
    SCOPED_TRACE(int(ck));
    auto m = adapted();
    m->set_checkpointing(ck);
    m->forward_backward(ids, labels, 0.1f);
    std::vector<std::vector<float>> got;
    for (auto& p : m->lora_params().all()) got.emplace_back(p.grad.data<float>(), p.grad.data<float>() + p.grad.numel());
    if (ref.empty()) ref = got;
    else EXPECT_EQ(got, ref);
  }
}

TEST(LoraMoe, PeftFolderRoundTripKeepsPeftNames) {
  auto m = adapted();
  const std::string dir = ::testing::TempDir() + "/lora_moe_roundtrip";
  std::filesystem::remove_all(dir);
  save_peft_adapter(*m, dir, "base");
  std::set<std::string> want, got;
  auto oracle = SafetensorsFile::open(kAdapter + "/adapter_model.safetensors");
  auto ours = SafetensorsFile::open(dir + "/adapter_model.safetensors");
  for (const auto& e : oracle.entries()) want.insert(e.name);
  for (const auto& e : ours.entries()) got.insert(e.name);
  EXPECT_EQ(got, want);  // PEFT's names, the nested experts wrapper (experts.base_layer) included
  auto back = load_hf_model(kBase, "cpu");
  load_peft_adapter(*back, dir);
  ASSERT_EQ(back->lora_params().all().size(), m->lora_params().all().size());
  for (auto& p : back->lora_params().all()) {
    SCOPED_TRACE(p.name);
    EXPECT_EQ(titan::testing::max_abs_diff(p.value, lora_value(*m, p.name)), 0.0);
  }
  std::filesystem::remove_all(dir);
}

TEST(LoraMoe, BadTargetsAreClearErrors) {
  auto msg = [](const ModelConfig& cfg, LoraConfig c) {
    try {
      c.validate("test");
      lora_select(cfg, c);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const ModelConfig moe = adapted()->config();
  LoraConfig c;
  c.target_modules = {"model.layers.*.mlp.experts"};
  EXPECT_NE(msg(moe, c).find("target_parameters"), std::string::npos) << msg(moe, c);
  c.target_modules = {"model.layers.0.mlp.gate"};
  EXPECT_NE(msg(moe, c).find("target_parameters"), std::string::npos) << msg(moe, c);
  c.target_modules = {};
  c.target_parameters = {"model.layers.*.mlp.experts.up_proj"};
  EXPECT_NE(msg(moe, c).find("matches no parameter"), std::string::npos) << msg(moe, c);
  c.target_parameters = {"model.layers.*.mlp.experts.*"};
  EXPECT_EQ(msg(moe, c), "");
  EXPECT_EQ(lora_select(moe, c).size(), 4u);
  c.dropout = 0.1;
  EXPECT_NE(msg(moe, c).find("dropout"), std::string::npos) << msg(moe, c);
  c.dropout = 0;
  ModelConfig dense = moe;
  dense.num_experts = 0;
  EXPECT_NE(msg(dense, c).find("no MoE layer"), std::string::npos) << msg(dense, c);
}

// With bf16 GEMMs (an f32 base rounded per step, or a bf16 base widened before the delta is added)
// the merged expert and router weights are rounded to bf16 for the expert GEMMs (the router stays
// f32): the loss and adapter gradients stay near the f32 ones. Not bit-equal to each other: the
// bf16 base rounds W before adding the delta, the f32 base rounds W + delta.
TEST(LoraMoe, Bf16GemmsAndBf16BaseStayNearF32) {
  Tensor ids = read_token_lines(kBase + "/tokens.txt");
  Tensor labels = next_token_labels(ids);
  auto f32 = adapted();
  const double l32 = f32->forward_backward(ids, labels, 0.1f);
  for (bool bf16_base : {false, true}) {
    SCOPED_TRACE(bf16_base ? "bf16 base" : "bf16 GEMMs");
    auto m = bf16_base ? load_hf_model(kBase, "cpu", /*frozen=*/true, DType::BF16) : load_hf_model(kBase, "cpu");
    load_peft_adapter(*m, kAdapter);
    m->freeze_base();
    m->set_compute_dtype(DType::BF16);
    const double l = m->forward_backward(ids, labels, 0.1f);
    double worst = 0;
    for (auto& p : m->lora_params().all()) {
      SCOPED_TRACE(p.name);
      const Tensor& ref = f32->lora_params().at(p.name).grad;
      worst = std::max(worst, titan::testing::max_diff_rel_to_peak(ref, p.grad));
    }
    std::printf("%s: |loss - f32| %.2e (sum), worst adapter grad rel to f32 %.2e\n", bf16_base ? "bf16 base" : "bf16 GEMMs",
                std::fabs(l - l32), worst);
    EXPECT_NEAR(l, l32, 0.05 * std::fabs(l32));
    EXPECT_LE(worst, 0.1);
  }
}

// Inference merges the MoE-parameter adapters into the base once (merge_lora_parameters): the same
// logits bit for bit as merging them into copies in every pass; training afterwards is refused.
TEST(LoraMoe, MergingParametersForInferenceIsBitIdentical) {
  Tensor ids = read_token_lines(kBase + "/tokens.txt");
  Tensor labels = next_token_labels(ids);
  for (const char* kernels : {"reference", "cpu"}) {
    SCOPED_TRACE(kernels);
    auto m = adapted(kernels);
    const Tensor want = logits_of(*m, ids, labels);
    m->merge_lora_parameters();
    EXPECT_TRUE(m->lora_parameters_merged());
    EXPECT_EQ(titan::testing::max_abs_diff(want, logits_of(*m, ids, labels)), 0.0);
    EXPECT_THROW(m->forward_backward(ids, labels, 1.f), std::exception);
  }
}

// An unfrozen base (titan score --dump-grads with an adapter): the base's router and expert
// gradients are those of the merged weights, as if the merged model were differentiated.
TEST(LoraMoe, UnfrozenBaseGetsTheMergedWeightsGradient) {
  Tensor ids = read_token_lines(kBase + "/tokens.txt");
  Tensor labels = next_token_labels(ids);
  auto m = load_hf_model(kBase, "cpu");
  load_peft_adapter(*m, kAdapter);
  m->params().zero_grad();
  m->forward_backward(ids, labels, 0.1f);
  auto merged = load_hf_model(kBase, "cpu");
  load_peft_adapter(*merged, kAdapter);
  merged->merge_lora();
  merged->params().zero_grad();
  merged->forward_backward(ids, labels, 0.1f);
  for (const char* name : {"model.layers.0.mlp.gate.weight", "model.layers.0.mlp.experts.3.down_proj.weight",
                           "model.layers.1.mlp.experts.5.up_proj.weight"}) {
    SCOPED_TRACE(name);
    EXPECT_LE(titan::testing::max_diff_rel_to_peak(merged->params().at(name).grad, m->params().at(name).grad), 1e-5);
  }
}
