// The predicted step memory (model/train_memory.h) against the allocator's measured peak of a
// real step: weights, trained gradients and AdamW moments allocated as the trainer does, then one
// forward_backward, for full fine-tuning and LoRA, each checkpointing mode, f32 and bf16 GEMMs; for
// Qwen3.5 (debug-qwen3_5's layers: Gated DeltaNet and gated attention) and the MoE models
// (Qwen3-MoE with a dense layer among the sparse ones, Qwen3.5-MoE with its shared expert).
#include <gtest/gtest.h>

#include <functional>

#include "core/allocator.h"
#include "model/decoder.h"
#include "model/train_memory.h"

using namespace titan;

namespace {

ModelConfig small_config() {
  ModelConfig c = flavor_config("debug-tiny");
  c.hidden_size = 128, c.intermediate_size = 352, c.num_hidden_layers = 3, c.vocab_size = 1000;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 32, c.max_position_embeddings = 512;
  return c;
}

// debug-qwen3_5 (three Gated DeltaNet layers, then gated attention) with a small vocabulary.
ModelConfig qwen3_5_config() {
  ModelConfig c = flavor_config("debug-qwen3_5");
  c.vocab_size = 1000;
  return c;
}

// debug-moe's family at small_config's size: layer 1 dense (mlp_only_layers), 0 and 2 routed over
// 8 experts (top 2), with the auxiliary loss; the experts narrow, so activations weigh.
ModelConfig moe_config() {
  ModelConfig c = flavor_config("debug-moe");
  c.hidden_size = 128, c.intermediate_size = 352, c.num_hidden_layers = 3, c.vocab_size = 1000;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 32, c.max_position_embeddings = 512;
  c.moe_intermediate_size = 64, c.mlp_only_layers = {1}, c.output_router_logits = true;
  return c;
}

// debug-qwen3_5-moe (routed experts and the shared expert in every layer), narrower experts.
ModelConfig qwen3_5_moe_config() {
  ModelConfig c = flavor_config("debug-qwen3_5-moe");
  c.vocab_size = 1000, c.num_experts = 4, c.moe_intermediate_size = 64, c.shared_expert_intermediate_size = 128;
  return c;
}

enum class Model { Dense, Qwen35, Moe, Qwen35Moe };
const char* model_name(Model m) {
  return m == Model::Dense ? "dense" : m == Model::Qwen35 ? "qwen3_5" : m == Model::Moe ? "qwen3_moe" : "qwen3_5_moe";
}

struct Case {
  bool lora;
  Checkpointing ckpt;
  DType compute;
  double dropout = 0;  // LoRA dropout
  DType base = DType::F32;  // LoRA's base_dtype: the frozen base's matmul weights
  Model model = Model::Dense;
};

// A bf16 base's values, filled in place with small deterministic ones (not the init's scales)
// through a per-parameter f32 temporary, far below the step's peak.
void fill_bf16_base(DecoderModel& m) {
  int64_t k = 0;
  for (auto& p : m.params().all()) {
    Tensor f = Tensor::empty(p.value.shape(), DType::F32);
    for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = 0.02f * float(((k++ * 7919) % 201) - 100) / 100.f;
    p.value.copy_(f);
  }
}

class TrainMemoryTest : public ::testing::TestWithParam<Case> {};

TEST_P(TrainMemoryTest, PredictionWithinTenPercentOfTheMeasuredPeak) {
  const Case& c = GetParam();
  const ModelConfig cfg = c.model == Model::Qwen35      ? qwen3_5_config()
                          : c.model == Model::Moe       ? moe_config()
                          : c.model == Model::Qwen35Moe ? qwen3_5_moe_config()
                                                        : small_config();
  const int64_t B = 2, S = 192;
  LoraConfig lc;
  lc.rank = 8, lc.alpha = 16, lc.dropout = c.dropout;
  lc.target_modules = {"model.layers.*.self_attn.[qkvo]_proj"};
  if (c.model == Model::Dense || c.model == Model::Qwen35) lc.target_modules.push_back("model.layers.*.mlp.*_proj");
  if (c.model == Model::Qwen35 || c.model == Model::Qwen35Moe)
    lc.target_modules.push_back("model.layers.*.linear_attn.*");
  if (c.model == Model::Qwen35Moe)  // the shared expert's projections and its gate
    lc.target_modules.push_back("model.layers.*.mlp.shared_expert*");
  cpu_allocator().reset_peak();
  const size_t before = cpu_allocator().stats().live_bytes;
  size_t peak = 0;
  {
    DecoderModel model(cfg, "cpu", false, /*frozen=*/c.lora, c.base);  // as the trainer builds a LoRA run's base
    if (c.base == DType::BF16) fill_bf16_base(model);
    else model.init_weights(InitScheme::HF, 1);
    if (c.lora) model.enable_lora(lc, 2);
    model.set_checkpointing(c.ckpt);
    model.set_compute_dtype(c.compute);
    std::vector<Tensor> moments;  // AdamW's exp_avg and exp_avg_sq of what is trained
    for (auto& p : (c.lora ? model.lora_params() : model.params()).all())
      for (int k = 0; k < 2; ++k) moments.push_back(Tensor::zeros(p.value.shape(), DType::F32));
    Tensor ids = Tensor::empty({B, S}, DType::I64), labels = Tensor::empty({B, S}, DType::I64);
    for (int64_t i = 0; i < B * S; ++i) ids.data<int64_t>()[i] = labels.data<int64_t>()[i] = (i * 7919) % cfg.vocab_size;
    model.forward_backward(ids, labels, 1.0f / float(B * S));  // the peak since before the model: setup included
    peak = cpu_allocator().stats().peak_bytes - before;
  }
  const TrainMemory m = predict_train_memory(cfg, B, S, c.ckpt, c.compute, c.lora ? &lc : nullptr, c.base);
  // The allocator sees tensors only: the delta rule's heap (m.heap) is not in its peak.
  const double ratio = double(m.total() - m.heap) / double(peak);
  std::printf(
      "%s lora=%d%s dropout=%g ckpt=%d %s: predicted %.3f MiB (activations %.3f), measured %.3f MiB "
      "(ratio %.3f)\n",
      model_name(c.model), int(c.lora), c.base == DType::BF16 ? " (bf16 base)" : "", c.dropout, int(c.ckpt),
      dtype_name(c.compute), double(m.total() - m.heap) / 1048576.0, double(m.activations - m.heap) / 1048576.0,
      double(peak) / 1048576.0, ratio);
  EXPECT_GT(ratio, 0.9);
  EXPECT_LT(ratio, 1.1);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (bool lora : {false, true})
    for (Checkpointing ck : {Checkpointing::None, Checkpointing::Selective, Checkpointing::Full})
      for (DType d : {DType::F32, DType::BF16}) v.push_back({lora, ck, d});
  v.push_back({true, Checkpointing::None, DType::F32, 0.1});
  v.push_back({true, Checkpointing::Full, DType::BF16, 0.1});
  for (Checkpointing ck : {Checkpointing::None, Checkpointing::Full})
    v.push_back({true, ck, DType::BF16, 0, DType::BF16});  // [lora] base_dtype = "bfloat16"
  for (Model md : {Model::Qwen35, Model::Moe, Model::Qwen35Moe})
    for (Checkpointing ck : {Checkpointing::None, Checkpointing::Selective, Checkpointing::Full})
      for (DType d : {DType::F32, DType::BF16}) v.push_back({false, ck, d, 0, DType::F32, md});
  // LoRA on Qwen3.5: both mixers' projections and the MLP (the MoE model: the shared expert and
  // its gate), with dropout, a bf16 base; on Qwen3-MoE the attention projections.
  v.push_back({true, Checkpointing::None, DType::F32, 0, DType::F32, Model::Qwen35});
  v.push_back({true, Checkpointing::Selective, DType::BF16, 0, DType::F32, Model::Qwen35});
  v.push_back({true, Checkpointing::Full, DType::F32, 0.1, DType::F32, Model::Qwen35});
  v.push_back({true, Checkpointing::None, DType::BF16, 0.1, DType::F32, Model::Qwen35});
  for (Checkpointing ck : {Checkpointing::None, Checkpointing::Full})
    v.push_back({true, ck, DType::BF16, 0, DType::BF16, Model::Qwen35});
  v.push_back({true, Checkpointing::None, DType::BF16, 0, DType::F32, Model::Qwen35Moe});
  v.push_back({true, Checkpointing::Full, DType::F32, 0.1, DType::F32, Model::Qwen35Moe});
  v.push_back({true, Checkpointing::Selective, DType::BF16, 0, DType::BF16, Model::Qwen35Moe});
  v.push_back({true, Checkpointing::None, DType::BF16, 0, DType::F32, Model::Moe});
  v.push_back({true, Checkpointing::Full, DType::BF16, 0, DType::BF16, Model::Moe});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Steps, TrainMemoryTest, ::testing::ValuesIn(cases()));

}  // namespace

// Qwen3.5 without running a step: checkpointing saves what it should; the delta rule's heap is
// counted when it sets the layer's peak (with debug-qwen3_5's and the published shapes the later
// dqkv working set is larger, so there it is 0; with narrow value heads and wide key heads it is
// not); what the planner does not cover yet is refused by name.
TEST(TrainMemory, Qwen35HeapAndRefusals) {
  ModelConfig c = qwen3_5_config();
  const TrainMemory none = predict_train_memory(c, 1, 4096, Checkpointing::None, DType::F32, nullptr);
  const TrainMemory sel = predict_train_memory(c, 1, 4096, Checkpointing::Selective, DType::F32, nullptr);
  const TrainMemory full = predict_train_memory(c, 1, 4096, Checkpointing::Full, DType::F32, nullptr);
  EXPECT_GT(none.activations, sel.activations);
  EXPECT_GT(sel.activations, full.activations);
  EXPECT_EQ(full.heap, 0);
  EXPECT_EQ(none.weights - none.rope, model_param_count(c) * 4);
  c.linear_num_key_heads = 2, c.linear_key_head_dim = 64, c.linear_num_value_heads = 8, c.linear_value_head_dim = 8;
  c.num_attention_heads = 2;  // so that a delta-net layer, not the gated attention one, is the largest
  c.intermediate_size = 64;   // and its mixer's backward, not its MLP's
  const TrainMemory narrow = predict_train_memory(c, 1, 4096, Checkpointing::Full, DType::F32, nullptr);
  // what the heap (the normalised q, k [T, KD], dq^, dk^ [T, Hv, dk], chunk states) adds to the
  // layer's peak beyond its later dqkv working set: more than 0, less than the heap itself
  EXPECT_GT(narrow.heap, 0);
  EXPECT_LT(narrow.heap, int64_t(4096) * (2 * 128 + 2 * 2 + 2 * 8 * 64) * 4 + (1 << 20));
  // Still refused by name: LoRA on MoE parameters (merged into a copy of the weights every pass),
  // and a tensor / context parallel layout of a MoE or Qwen3.5 model.
  const auto msg = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const ModelConfig moe = qwen3_5_moe_config();
  LoraConfig lc;
  lc.target_modules = {"model.layers.*.self_attn.[qkvo]_proj"};
  EXPECT_EQ(msg([&] { predict_train_memory(moe, 1, 64, Checkpointing::None, DType::F32, &lc); }), "");
  lc.target_parameters = {"model.layers.*.mlp.experts.gate_up_proj"};
  EXPECT_NE(msg([&] {
              predict_train_memory(moe, 1, 64, Checkpointing::None, DType::F32, &lc);
            }).find("LoRA on MoE parameters"),
            std::string::npos);
  for (const ModelConfig& m : {moe, moe_config(), qwen3_5_config()})
    EXPECT_NE(msg([&] {
                train_step_timeline(m, 1, 64, Checkpointing::None, DType::F32, StepLayout{2});
              }).find("dense attention models only"),
              std::string::npos);
}

// A MoE model's prediction follows its layers: the same model with every layer dense (its MLP of
// intermediate_size) predicts the dense layers' sizes, one sparse layer more adds that layer's
// routed experts' activations, and the expert weights and their optimizer state.
TEST(TrainMemory, MoeLayersMixWithDenseOnes) {
  ModelConfig c = moe_config();
  c.output_router_logits = false;
  const auto at = [](const ModelConfig& m) {
    return predict_train_memory(m, 2, 128, Checkpointing::None, DType::F32, nullptr);
  };
  ModelConfig all_dense = c;
  all_dense.mlp_only_layers = {0, 1, 2};
  ModelConfig all_sparse = c;
  all_sparse.mlp_only_layers = {};
  const TrainMemory d = at(all_dense), one = at(c), s = at(all_sparse);
  EXPECT_EQ(d.weights - d.rope, model_param_count(all_dense) * 4);
  EXPECT_EQ(s.weights - s.rope, model_param_count(all_sparse) * 4);
  EXPECT_EQ(s.optimizer, 2 * s.grads);
  // one layer dense -> sparse changes the kept activations by the same amount each time
  EXPECT_EQ(s.activations - one.activations, one.activations - at([&] {
                                                                 ModelConfig m = c;
                                                                 m.mlp_only_layers = {1, 2};
                                                                 return m;
                                                               }())
                                                                   .activations);
  EXPECT_NE(d.activations, s.activations);
  // The auxiliary loss's logit gradients [T, E] per sparse layer
  ModelConfig aux = all_sparse;
  aux.output_router_logits = true;
  EXPECT_EQ(at(aux).activations - s.activations, 3 * 2 * 128 * c.num_experts * 4);
}
