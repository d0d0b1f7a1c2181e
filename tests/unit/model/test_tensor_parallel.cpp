// Tensor parallelism in the decoder (model/tensor_parallel.h): a model built from tp ranks' local
// shapes gives one process's loss, and its gradients gathered from the shards equal one
// process's, for each family's layout (qwen3: q/k norms, tied head; llama: untied; qwen2:
// biases), with and without sequence parallelism, under activation checkpointing, with packed
// documents, with bf16 matmuls, and for MoE layers (each expert split like a dense MLP, the
// router's partial gradient and the auxiliary loss's share reduced over tp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include "comm/thread_comm.h"
#include "common/test_util.h"
#include "model/decoder.h"
#include "model/positions.h"
#include "model/tensor_parallel.h"
#include "parallel_test_util.h"

using namespace titan;

namespace {

using test::Batch;
using test::make_batch;

double rel_diff(const Tensor& a, const Tensor& b) { return test::rel_err(a, b); }

struct Case {
  std::string model_type = "qwen3";
  bool tied = true, sp = true, packed = false, moe = false;
  Checkpointing ckpt = Checkpointing::None;
  DType compute = DType::F32;
  int tp = 2;
};

void check_case(const Case& k) {
  ModelConfig c = flavor_config("debug-tiny");  // 4 heads, 2 KV heads, vocab 512, MLP 160
  c.model_type = k.model_type;
  c.tie_word_embeddings = k.tied;
  if (k.tp == 4) c.num_key_value_heads = 4;
  if (k.moe) {  // every layer sparse: 4 experts of 32, top-2, with the auxiliary loss
    c.model_type = "qwen3_moe";
    c.num_experts = 4, c.num_experts_per_tok = 2, c.moe_intermediate_size = 32, c.norm_topk_prob = true;
    c.output_router_logits = true, c.router_aux_loss_coef = 0.05;
  }
  const int64_t B = 2, S = 24;
  const Batch b = make_batch(c, B, S, k.packed ? std::vector<int64_t>{S / 3} : std::vector<int64_t>{});
  const Tensor* pos = k.packed ? &b.positions : nullptr;
  const float scale = 1.0f / float(count_labels(b.labels));
  DecoderModel ref(c);
  ref.init_weights(InitScheme::Torchtitan, 5);
  ref.set_compute_dtype(k.compute);
  ref.set_checkpointing(k.ckpt);
  const double ref_loss = ref.forward_backward(b.ids, b.labels, scale, pos);
  const double ref_score = ref.forward(b.ids, b.labels, nullptr, pos);
  const double tol = k.compute == DType::BF16 ? 2e-2 : 1e-5;
  std::mutex mu;
  comm::run_threaded_ranks(k.tp, [&](comm::Comm& tp) {
    TensorParallel t{&tp, k.sp};
    DecoderModel m(c, "cpu", false, false, DType::F32, t);
    m.init_weights(InitScheme::Torchtitan, 5);
    m.set_compute_dtype(k.compute);
    m.set_checkpointing(k.ckpt);
    const double loss = m.forward_backward(b.ids, b.labels, scale, pos);
    const double score = m.forward(b.ids, b.labels, nullptr, pos);
    std::vector<std::pair<std::string, double>> diffs;
    for (size_t i = 0; i < m.params().all().size(); ++i) {
      const Param& p = m.params().all()[i];
      const Param& r = ref.params().all()[i];
      const auto [v, g] = test::gathered_param(tp, m, i);
      diffs.push_back({p.name + " value", rel_diff(v, r.value)});
      diffs.push_back({p.name + " grad", rel_diff(g, r.grad)});
    }
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_NEAR(loss, ref_loss, std::fabs(ref_loss) * tol) << "rank " << tp.rank();
    EXPECT_NEAR(score, ref_score, std::fabs(ref_score) * tol) << "rank " << tp.rank();
    for (auto& [name, d] : diffs) EXPECT_LE(d, name.find("value") != std::string::npos ? 0.0 : tol) << name << " rank " << tp.rank();
  });
}

}  // namespace

TEST(TensorParallel, Qwen3SequenceParallelEqualsOneProcess) { check_case({}); }
TEST(TensorParallel, Qwen3WithoutSequenceParallel) {
  Case k;
  k.sp = false;
  check_case(k);
}
TEST(TensorParallel, FourRanks) {
  Case k;
  k.tp = 4;
  check_case(k);
}
TEST(TensorParallel, LlamaUntiedHead) {
  Case k;
  k.model_type = "llama", k.tied = false;
  check_case(k);
}
TEST(TensorParallel, Qwen2Biases) {
  Case k;
  k.model_type = "qwen2";
  check_case(k);
}
TEST(TensorParallel, ActivationCheckpointingFullAndSelective) {
  Case k;
  k.ckpt = Checkpointing::Full;
  check_case(k);
  k.ckpt = Checkpointing::Selective, k.sp = false;
  check_case(k);
}
TEST(TensorParallel, PackedDocuments) {
  Case k;
  k.packed = true;
  check_case(k);
}
TEST(TensorParallel, Bf16Matmuls) {
  Case k;
  k.compute = DType::BF16;
  check_case(k);
}

TEST(TensorParallel, MoEExpertsSplitByTheirIntermediateDim) {
  Case k;
  k.moe = true;
  check_case(k);
  k.sp = false, k.ckpt = Checkpointing::Full;
  check_case(k);
}

TEST(TensorParallel, Refusals) {
  ModelConfig c = flavor_config("debug-tiny");  // 2 KV heads
  comm::run_threaded_ranks(4, [&](comm::Comm& tp) {
    EXPECT_ERROR_HAS(DecoderModel m(c, "cpu", false, false, DType::F32, TensorParallel{&tp, true}),
                     "num_key_value_heads = 2 does not divide by [parallelism] tensor_parallel_degree = 4");
  });
  comm::run_threaded_ranks(2, [&](comm::Comm& tp) {
    DecoderModel m(c, "cpu", false, false, DType::F32, TensorParallel{&tp, true});
    m.init_weights(InitScheme::Torchtitan, 1);
    const Batch b = make_batch(c, 1, 5);  // 5 tokens over 2 ranks
    EXPECT_ERROR_HAS(m.forward_backward(b.ids, b.labels, 1.0f), "does not divide by [parallelism] tensor_parallel_degree = 2");
  });
}

// LoRA under tensor parallelism (model/lora.h): each adapter split like its linear (lora_B's rows
// on q/k/v and gate/up, lora_A's columns on o_proj and down_proj; the other factor replicated).
// With non-zero adapters (B = 0 would leave every lora_A gradient 0) and dropout, a frozen base's
// loss and every adapter gradient gathered from the tp ranks equal one process's, and the
// replicated factors' gradients are bit-identical on every tp rank (each rank steps its copy).
namespace {

struct LoraCase {
  std::string model_type = "qwen3";
  bool sp = true, frozen = true, tied = true, moe = false;
  double dropout = 0.1;
  Checkpointing ckpt = Checkpointing::None;
  DType compute = DType::F32;
  int tp = 2;
};

void check_lora_case(const LoraCase& k) {
  ModelConfig c = flavor_config("debug-tiny");  // 4 heads, 2 KV heads, vocab 512, MLP 160, 2 layers
  c.model_type = k.model_type;
  c.tie_word_embeddings = k.tied;
  if (k.tp == 4) c.num_key_value_heads = 4;
  LoraConfig lc;
  lc.rank = 4, lc.alpha = 8, lc.dropout = k.dropout;
  lc.target_modules = {"model.layers.*.self_attn.[qkvo]_proj", "model.layers.*.mlp.*_proj"};
  if (k.moe) {  // every layer sparse (4 experts of 32, top-2, the auxiliary loss): adapters on attention
    c.model_type = "qwen3_moe";
    c.num_experts = 4, c.num_experts_per_tok = 2, c.moe_intermediate_size = 32, c.norm_topk_prob = true;
    c.output_router_logits = true, c.router_aux_loss_coef = 0.05;
    lc.target_modules = {"model.layers.*.self_attn.[qkvo]_proj"};
  }
  const int64_t B = 2, S = 24;
  const Batch b = make_batch(c, B, S);
  const float scale = 1.0f / float(count_labels(b.labels));
  DecoderModel ref(c, "cpu", false, k.frozen);
  ref.init_weights(InitScheme::Torchtitan, 5);
  ref.enable_lora(lc, 11);
  uint64_t seed = 100;
  for (Param& p : ref.lora_params().all()) p.value.copy_(test::randn(p.value.shape(), seed++, 0.05));
  ref.set_compute_dtype(k.compute);
  ref.set_checkpointing(k.ckpt);
  ref.set_lora_dropout_rows(3, 8);
  const double ref_loss = ref.forward_backward(b.ids, b.labels, scale);
  const double tol = k.compute == DType::BF16 ? 2e-2 : 1e-5;
  std::mutex mu;
  comm::run_threaded_ranks(k.tp, [&](comm::Comm& tp) {
    DecoderModel m(c, "cpu", false, k.frozen, DType::F32, TensorParallel{&tp, k.sp});
    m.init_weights(InitScheme::Torchtitan, 5);
    m.enable_lora(lc, 11);
    const auto& specs = m.lora_param_specs();
    auto& ps = m.lora_params().all();
    for (size_t i = 0; i < ps.size(); ++i) {  // this rank's blocks of the reference's adapters
      const Tensor& whole = ref.lora_params().all()[i].value;
      if (specs[i].placement.tp_dim >= 0) tp_take_shard(whole, specs[i].placement.tp_dim, tp.rank(), tp.size(), ps[i].value);
      else ps[i].value.copy_(whole);
    }
    m.set_compute_dtype(k.compute);
    m.set_checkpointing(k.ckpt);
    m.set_lora_dropout_rows(3, 8);
    const double loss = m.forward_backward(b.ids, b.labels, scale);
    std::vector<std::pair<std::string, double>> diffs;
    std::vector<std::string> differ_over_tp;
    for (size_t i = 0; i < ps.size(); ++i) {
      const ParamSpec& s = specs[i];
      Tensor g = ps[i].grad;
      if (s.placement.tp_dim >= 0) {
        g = Tensor::empty(Shape(s.shape), DType::F32);
        tp_gather_shards(tp, ps[i].grad, s.placement.tp_dim, g);
      } else {  // replicated: rank 0's bytes on every rank
        Tensor r0 = g.clone();
        tp.broadcast(r0.raw(), r0.nbytes(), 0);
        if (std::memcmp(r0.raw(), g.raw(), g.nbytes()) != 0) differ_over_tp.push_back(s.name);
      }
      EXPECT_EQ(g.shape(), Shape(s.shape)) << s.name;
      diffs.push_back({s.name, rel_diff(g, ref.lora_params().all()[i].grad)});
    }
    // The base's gradients when it is not frozen (titan score --dump-grads with an adapter).
    if (!k.frozen)
      for (size_t i = 0; i < m.params().all().size(); ++i) {
        const ParamSpec& s = m.param_specs()[i];
        Tensor g = m.params().all()[i].grad;
        if (s.placement.tp_dim >= 0) {
          g = Tensor::empty(Shape(s.shape), DType::F32);
          tp_gather_shards(tp, m.params().all()[i].grad, s.placement.tp_dim, g, s.placement.tp_segments);
        }
        diffs.push_back({s.name, rel_diff(g, ref.params().all()[i].grad)});
      }
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(ps.size(), ref.lora_params().all().size());
    EXPECT_NEAR(loss, ref_loss, std::fabs(ref_loss) * tol) << "rank " << tp.rank();
    double worst = 0;
    for (auto& [name, d] : diffs) {
      EXPECT_LE(d, tol) << name << " grad, rank " << tp.rank();
      worst = std::max(worst, d);
    }
    if (tp.rank() == 0)
      std::printf("[ lora tp%d ] loss %.3g relative off one process's, gradients within %.3g of their peak\n", k.tp,
                  std::fabs(loss - ref_loss) / std::fabs(ref_loss), worst);
    EXPECT_TRUE(differ_over_tp.empty()) << differ_over_tp.front() << " differs between tp ranks";
  });
}

}  // namespace

TEST(TensorParallelLora, SequenceParallelWithDropoutEqualsOneProcess) { check_lora_case({}); }
TEST(TensorParallelLora, WithoutSequenceParallel) {
  LoraCase k;
  k.sp = false;
  check_lora_case(k);
}
TEST(TensorParallelLora, FourRanksAndNoDropout) {
  LoraCase k;
  k.tp = 4, k.dropout = 0;
  check_lora_case(k);
}
TEST(TensorParallelLora, ActivationCheckpointingFullAndSelective) {
  LoraCase k;
  k.ckpt = Checkpointing::Full;
  check_lora_case(k);
  k.ckpt = Checkpointing::Selective, k.sp = false;
  check_lora_case(k);
}
TEST(TensorParallelLora, UnfrozenLlamaBaseAndQwen2) {
  LoraCase k;
  k.model_type = "llama", k.tied = false, k.frozen = false;
  check_lora_case(k);
  k = LoraCase();
  k.model_type = "qwen2";
  check_lora_case(k);
}
TEST(TensorParallelLora, AttentionAdaptersOfAnMoEModel) {
  LoraCase k;
  k.moe = true;
  check_lora_case(k);
}
TEST(TensorParallelLora, Bf16Matmuls) {
  LoraCase k;
  k.compute = DType::BF16;
  check_lora_case(k);
}

// A bf16 base ([lora] base_dtype) at tp2 trains bit for bit like the f32 base with bf16 matmuls at
// tp2 (the same rounded weights: each block of a whole tensor's f32 init rounded once), as one
// process does: loss and every adapter gradient.
TEST(TensorParallelLora, Bf16BaseEqualsF32BaseWithBf16Matmuls) {
  for (const bool tied : {true, false}) {
    ModelConfig c = flavor_config("debug-tiny");
    c.model_type = "llama", c.tie_word_embeddings = tied;
    LoraConfig lc;
    lc.rank = 4, lc.alpha = 8, lc.dropout = 0.1;
    lc.target_modules = {"model.layers.*.self_attn.[qkvo]_proj", "model.layers.*.mlp.*_proj"};
    const Batch b = make_batch(c, 2, 24);
    const float scale = 1.0f / float(count_labels(b.labels));
    std::mutex mu;
    comm::run_threaded_ranks(2, [&](comm::Comm& tp) {
      std::vector<std::unique_ptr<DecoderModel>> ms;
      for (const DType wdt : {DType::F32, DType::BF16}) {
        auto m = std::make_unique<DecoderModel>(c, "cpu", false, true, wdt, TensorParallel{&tp, true});
        m->init_weights(InitScheme::Torchtitan, 5);
        m->enable_lora(lc, 11);
        uint64_t seed = 100;
        for (Param& p : m->lora_params().all()) p.value.copy_(test::randn(p.value.shape(), seed++, 0.05));
        m->set_compute_dtype(DType::BF16);
        m->set_lora_dropout_rows(2, 4);
        ms.push_back(std::move(m));
      }
      const double l32 = ms[0]->forward_backward(b.ids, b.labels, scale);
      const double l16 = ms[1]->forward_backward(b.ids, b.labels, scale);
      std::vector<std::string> differ;
      for (size_t i = 0; i < ms[0]->lora_params().all().size(); ++i) {
        const Tensor& g0 = ms[0]->lora_params().all()[i].grad;
        const Tensor& g1 = ms[1]->lora_params().all()[i].grad;
        if (std::memcmp(g0.raw(), g1.raw(), g0.nbytes()) != 0) differ.push_back(ms[0]->lora_params().all()[i].name);
      }
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_EQ(l32, l16) << "tied " << tied << " rank " << tp.rank();
      EXPECT_TRUE(differ.empty()) << differ.front() << " (tied " << tied << ", rank " << tp.rank() << ")";
    });
  }
}

TEST(TensorParallelLora, RefusesAdaptersOnMoEParametersAndATrainableBf16Model) {
  ModelConfig c = flavor_config("debug-tiny");
  c.model_type = "qwen3_moe";
  c.num_experts = 4, c.num_experts_per_tok = 2, c.moe_intermediate_size = 32;
  LoraConfig lc;
  lc.target_parameters = {"model.layers.*.mlp.experts.gate_up_proj"};
  comm::run_threaded_ranks(2, [&](comm::Comm& tp) {
    DecoderModel m(c, "cpu", false, true, DType::F32, TensorParallel{&tp, true});
    EXPECT_ERROR_HAS(m.enable_lora(lc, 1),
                     "LoRA: with tensor parallelism ([parallelism] tensor_parallel_degree = 2) the MoE parameters "
                     "(model.layers.0.mlp.experts.gate_up_proj, [lora] target_parameters) take no adapters");
    EXPECT_ERROR_HAS(DecoderModel b(c, "cpu", false, false, DType::BF16, TensorParallel{&tp, true}),
                     "tensor parallelism: bf16 weights only for a frozen (LoRA) base");
  });
}
