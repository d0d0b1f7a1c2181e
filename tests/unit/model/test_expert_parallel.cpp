// Expert parallelism in the decoder (model/expert_parallel.h): ep ranks, each with its own rows of
// the batch and E / ep experts of every sparse layer, give together one process's loss and
// gradients: the non-expert gradients summed over the ranks, each expert's on the rank that
// holds it (its tokens from every rank reached it by the dispatch). For Qwen3-MoE at ep 2 and 4,
// under activation checkpointing, with bf16 matmuls, with the expert bias steering the routing,
// and for Qwen3.5-MoE (Gated DeltaNet layers and a shared expert beside the routed ones).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>
#include <set>

#include "comm/thread_comm.h"
#include "common/test_util.h"
#include "model/decoder.h"
#include "parallel_test_util.h"

using namespace titan;

namespace {

struct Case {
  std::string flavor = "qwen3_moe";
  int ep = 2;
  Checkpointing ckpt = Checkpointing::None;
  DType compute = DType::F32;
  bool bias = false;
};

ModelConfig config_of(const Case& k) {
  if (k.flavor == "qwen3_5_moe") {
    ModelConfig c = flavor_config("debug-qwen3_5-moe");  // a Gated DeltaNet layer, then gated attention
    c.num_hidden_layers = 2;
    c.layer_mixers = {c.layer_mixers[0], c.layer_mixers[3]};
    return c;
  }
  ModelConfig c = flavor_config("debug-tiny");  // every layer sparse: 8 experts of 32, top-2
  c.model_type = "qwen3_moe";
  c.num_experts = 8, c.num_experts_per_tok = 2, c.moe_intermediate_size = 32, c.norm_topk_prob = true;
  return c;
}

void check_case(const Case& k) {
  const ModelConfig c = config_of(k);
  const int64_t rows_per_rank = 2, S = 16, B = rows_per_rank * k.ep;
  const test::Batch batch = test::make_batch(c, B, S);
  const Tensor &ids = batch.ids, &labels = batch.labels;
  const float scale = 1.0f / float(count_labels(labels));
  auto setup = [&](DecoderModel& m) {
    m.init_weights(InitScheme::Torchtitan, 5);
    m.set_compute_dtype(k.compute);
    m.set_checkpointing(k.ckpt);
    if (k.bias) {  // a bias that changes the choice: every layer's expert 1 pushed up
      m.enable_expert_bias();
      for (auto& t : m.expert_bias_state())
        if (t.name.ends_with(".expert_bias")) t.tensor.data<float>()[1] = 0.3f;
    }
  };
  DecoderModel ref(c);
  setup(ref);
  const double ref_loss = ref.forward_backward(ids, labels, scale);
  std::map<std::string, const Param*> want;
  for (const Param& p : ref.params().all()) want[p.name] = &p;
  // Summed over the ranks: the loss and the non-expert gradients.
  std::map<std::string, Tensor> sums;
  double loss_sum = 0;
  std::set<std::string> experts_seen;
  std::mutex mu;
  const double tol = k.compute == DType::BF16 ? 2e-2 : 1e-5;
  comm::run_threaded_ranks(k.ep, [&](comm::Comm& ep) {
    DecoderModel m(c, "cpu", false, false, DType::F32, {}, ExpertParallel{&ep});
    setup(m);
    const int64_t r = ep.rank();
    const Tensor my_ids = ids.slice0(r * rows_per_rank, (r + 1) * rows_per_rank);
    const Tensor my_labels = labels.slice0(r * rows_per_rank, (r + 1) * rows_per_rank);
    const double loss = m.forward_backward(my_ids, my_labels, scale);
    std::lock_guard<std::mutex> lock(mu);
    loss_sum += loss;
    EXPECT_EQ(int64_t(m.params().all().size()),
              int64_t(ref.params().all().size()) - 3 * c.num_sparse_layers() * c.num_experts * (k.ep - 1) / k.ep);
    for (size_t i = 0; i < m.params().all().size(); ++i) {
      const Param& p = m.params().all()[i];
      const ParamSpec& s = m.param_specs()[i];
      ASSERT_TRUE(want.count(p.name)) << p.name;
      EXPECT_EQ(test::rel_err(p.value, want[p.name]->value), 0.0) << p.name << " value, rank " << r;
      if (s.expert >= 0) {  // this rank's expert: the whole gradient
        EXPECT_EQ(s.expert / (c.num_experts / k.ep), r) << p.name;
        EXPECT_LE(test::rel_err(p.grad, want[p.name]->grad), tol) << p.name << " grad, rank " << r;
        EXPECT_TRUE(experts_seen.insert(p.name).second) << p.name << " on two ranks";
        continue;
      }
      auto it = sums.find(p.name);
      if (it == sums.end()) it = sums.emplace(p.name, Tensor::zeros(p.grad.shape(), DType::F32)).first;
      float* acc = it->second.data<float>();
      for (int64_t j = 0; j < p.grad.numel(); ++j) acc[j] += p.grad.data<float>()[j];
    }
  });
  EXPECT_NEAR(loss_sum, ref_loss, std::fabs(ref_loss) * tol);
  for (auto& [name, g] : sums) EXPECT_LE(test::rel_err(g, want[name]->grad), tol) << name << " grad (sum over ranks)";
  EXPECT_EQ(int64_t(experts_seen.size() + sums.size()), int64_t(ref.params().all().size()));
}

}  // namespace

TEST(ExpertParallel, Qwen3MoeEp2EqualsOneProcess) { check_case({}); }
TEST(ExpertParallel, Qwen3MoeEp4EqualsOneProcess) {
  Case k;
  k.ep = 4;
  check_case(k);
}
TEST(ExpertParallel, ActivationCheckpointingFullAndSelective) {
  Case k;
  k.ckpt = Checkpointing::Full;
  check_case(k);
  k.ckpt = Checkpointing::Selective;
  check_case(k);
}
TEST(ExpertParallel, Bf16Matmuls) {
  Case k;
  k.compute = DType::BF16;
  check_case(k);
}
TEST(ExpertParallel, ExpertBiasSteersTheSameChoice) {
  Case k;
  k.bias = true;
  check_case(k);
}
TEST(ExpertParallel, Qwen3_5MoeWithSharedExpert) {
  Case k;
  k.flavor = "qwen3_5_moe";
  check_case(k);
}

TEST(ExpertParallel, RefusesWhatItDoesNotBuild) {
  comm::run_threaded_ranks(2, [&](comm::Comm& ep) {
    ModelConfig dense = flavor_config("debug-tiny");
    EXPECT_NE(test::error_of([&] { DecoderModel m(dense, "cpu", false, false, DType::F32, {}, ExpertParallel{&ep}); })
                  .find("the model has no MoE layers"),
              std::string::npos);
    ModelConfig odd = config_of({});
    odd.num_experts = 7, odd.num_experts_per_tok = 2;
    EXPECT_NE(test::error_of([&] { DecoderModel m(odd, "cpu", false, false, DType::F32, {}, ExpertParallel{&ep}); })
                  .find("num_experts = 7 does not divide"),
              std::string::npos);
    DecoderModel frozen(config_of({}), "cpu", false, true, DType::F32, {}, ExpertParallel{&ep});  // a LoRA base
    LoraConfig lc;
    lc.rank = 4, lc.alpha = 8, lc.target_parameters = {"model.layers.*.mlp.experts.gate_up_proj"};
    const std::string e = test::error_of([&] { frozen.enable_lora(lc, 1); });
    EXPECT_NE(e.find("take no adapters"), std::string::npos) << e;
  });
}
