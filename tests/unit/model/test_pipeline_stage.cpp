// Pipeline stages of the decoder (model/pipeline.h): the model cut into stages, each held by its
// own model (only its units' parameters; a tied embedding also on the last stage), run
// microbatch by microbatch through stage_forward / stage_backward with the activations and their
// gradients handed from stage to stage, gives one process's loss and gradients (a tied
// embedding's: the first and last stage's summed), for dense Qwen3 (tied), Llama (untied) and
// Qwen3-MoE, 2 and 4 stages, with activation checkpointing; and the stage split rules.
#include <gtest/gtest.h>

#include <map>

#include "common/test_util.h"
#include "model/decoder.h"
#include "parallel_test_util.h"

using namespace titan;

namespace {

struct Case {
  std::string model_type = "qwen3";
  bool tied = true;
  int64_t stages = 2, layers_per_stage = 0;
  Checkpointing ckpt = Checkpointing::None;
};

void check_case(const Case& k) {
  ModelConfig c = flavor_config("debug-tiny");
  c.model_type = k.model_type == "qwen3_moe" ? "qwen3_moe" : k.model_type;
  c.tie_word_embeddings = k.tied;
  c.num_hidden_layers = 4;
  if (k.model_type == "qwen3_moe")
    c.num_experts = 4, c.num_experts_per_tok = 2, c.moe_intermediate_size = 32, c.norm_topk_prob = true;
  const int64_t B = 2, S = 12;
  const test::Batch batch = test::make_batch(c, B, S);
  const Tensor &ids = batch.ids, &labels = batch.labels;
  const float scale = 1.0f / float(count_labels(labels));
  DecoderModel ref(c);
  ref.init_weights(InitScheme::Torchtitan, 5);
  ref.set_checkpointing(k.ckpt);
  const double want = ref.forward_backward(ids, labels, scale);
  const PipelineStages all = pipeline_stages(c.num_hidden_layers, k.stages, k.layers_per_stage);
  std::vector<std::unique_ptr<DecoderModel>> stage;
  for (int64_t s = 0; s < k.stages; ++s) {
    PipelineStages mine = all;
    mine.held = {s};
    stage.push_back(std::make_unique<DecoderModel>(c, "cpu", false, false, DType::F32, TensorParallel{},
                                                   ExpertParallel{}, mine));
    stage.back()->init_weights(InitScheme::Torchtitan, 5);
    stage.back()->set_checkpointing(k.ckpt);
  }
  // Forward through the stages, then backward from the last.
  std::vector<std::shared_ptr<DecoderModel::StagePass>> passes;
  Tensor x;
  for (int64_t s = 0; s < k.stages; ++s) {
    Tensor out;
    passes.push_back(stage[size_t(s)]->stage_forward(s, ids, nullptr, s ? &x : nullptr, &out));
    x = out;
  }
  double loss = 0;
  Tensor dy;
  for (int64_t s = k.stages - 1; s >= 0; --s) {
    Tensor dx;
    loss += stage[size_t(s)]->stage_backward(*passes[size_t(s)], labels, scale, s < k.stages - 1 ? &dy : nullptr, &dx);
    dy = dx;
  }
  EXPECT_NEAR(loss, want, 1e-6 * std::fabs(want));
  // Every parameter on the stage that holds it, with one process's value and gradient.
  std::map<std::string, Tensor> grads;
  for (auto& m : stage)
    for (const Param& p : m->params().all()) {
      auto it = grads.find(p.name);
      if (it == grads.end()) {
        grads[p.name] = p.grad.clone();
        continue;
      }
      float* a = it->second.data<float>();  // the tied embedding: first and last stage summed
      for (int64_t i = 0; i < p.grad.numel(); ++i) a[i] += p.grad.data<float>()[i];
    }
  ASSERT_EQ(grads.size(), ref.params().all().size());
  for (const Param& r : ref.params().all()) {
    ASSERT_TRUE(grads.count(r.name)) << r.name;
    EXPECT_LE(test::rel_err(grads[r.name], r.grad), 1e-5) << r.name;
  }
  // Only the stage's units: stage 0 has no head, the last no first layer.
  for (const Param& p : stage[0]->params().all()) EXPECT_NE(p.name, "model.norm.weight");
  for (const Param& p : stage.back()->params().all()) EXPECT_EQ(p.name.find("model.layers.0."), std::string::npos);
}

}  // namespace

TEST(PipelineStage, TwoStagesTiedEqualOneProcess) { check_case({}); }
TEST(PipelineStage, FourStagesUntiedLlama) {
  Case k;
  k.model_type = "llama", k.tied = false, k.stages = 4;
  check_case(k);
}
TEST(PipelineStage, MoEWithActivationCheckpointing) {
  Case k;
  k.model_type = "qwen3_moe", k.ckpt = Checkpointing::Full;
  check_case(k);
  k.ckpt = Checkpointing::Selective, k.stages = 3;
  check_case(k);
}
TEST(PipelineStage, LayersPerStage) {
  Case k;
  k.stages = 3, k.layers_per_stage = 2;
  check_case(k);
}

TEST(PipelineStage, StageSplits) {
  PipelineStages p = pipeline_stages(10, 4);
  EXPECT_EQ(p.layer_begin, (std::vector<int64_t>{0, 3, 6, 8, 10}));
  p = pipeline_stages(10, 4, 3);  // middle stages 3 layers, first and last 2 each
  EXPECT_EQ(p.layer_begin, (std::vector<int64_t>{0, 2, 5, 8, 10}));
  EXPECT_EQ(describe_stages(pipeline_stages(4, 2)), "stage 0: embedding + layers 0-1 | stage 1: layers 2-3 + head");
  EXPECT_EQ(stages_of_rank(8, 4, 1), (std::vector<int64_t>{1, 5}));
  EXPECT_NE(test::error_of([] { pipeline_stages(3, 4); }).find("every stage needs at least one layer"), std::string::npos);
  EXPECT_NE(test::error_of([] { pipeline_stages(8, 4, 4); }).find("pipeline_parallel_layers_per_stage"), std::string::npos);
}
