// Tensor parallelism for the Qwen3.5 family (model/tensor_parallel.h): the Gated DeltaNet split by
// whole linear key heads and their value heads (in_proj_qkv and conv1d part by part), the gated
// attention by whole KV groups (q_proj's per-head query and gate rows), the dense MLP as Qwen3's.
// A model built from tp ranks' local shapes gives one process's loss, and every gradient gathered
// from the shards equals one process's: with and without sequence parallelism, at 2 and 4 ranks,
// under activation checkpointing, with packed documents (the recurrence and the conv restart at
// each document), with bf16 matmuls; and qwen3_5_moe (routed experts as Qwen3-MoE's, the shared
// expert by its intermediate dim, its gate's partial gradient summed over tp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <numeric>

#include "comm/thread_comm.h"
#include "common/test_util.h"
#include "model/decoder.h"
#include "model/tensor_parallel.h"
#include "parallel_test_util.h"

using namespace titan;

namespace {

using test::Batch;
using test::make_batch;

struct Case {
  bool sp = true, packed = false, moe = false;
  Checkpointing ckpt = Checkpointing::None;
  DType compute = DType::F32;
  int tp = 2;
};

// debug-qwen3_5 (4 layers: 3 Gated DeltaNet, then gated attention; 4 heads of 64, 2 KV heads;
// 4 linear key heads, 8 value heads, of 32) with a small vocabulary and MLP; at 4 ranks 4 KV heads.
// moe: debug-qwen3_5-moe (every layer routed over 8 experts of 128, top 2, with a shared expert of
// 256 and its sigmoid gate), with the router's auxiliary loss.
ModelConfig test_config(int tp, bool moe = false) {
  ModelConfig c = flavor_config(moe ? "debug-qwen3_5-moe" : "debug-qwen3_5");
  c.vocab_size = 512, c.intermediate_size = 160;
  if (tp == 4) c.num_key_value_heads = 4;
  if (moe) c.output_router_logits = true, c.router_aux_loss_coef = 0.05;
  return c;
}

void check_case(const Case& k) {
  const ModelConfig c = test_config(k.tp, k.moe);
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
  // The decay gate's parameters (in_proj_a, dt_bias, A_log): their gradients are sums over tokens
  // and heads that cancel, so one process's own move by up to 2.6e-5 of their peak when every
  // weight is perturbed by 1e-7 relative (measured on this batch) -- the size of the reordered
  // sums of the row-parallel reductions. A misplaced head would be off by O(1).
  const double gate_tol = k.compute == DType::BF16 ? 2e-2 : 2e-4;
  auto gate_path = [](const std::string& n) {
    return n.find("in_proj_a.") != std::string::npos || n.find("dt_bias") != std::string::npos ||
           n.find("A_log") != std::string::npos;
  };
  std::mutex mu;
  comm::run_threaded_ranks(k.tp, [&](comm::Comm& tp) {
    DecoderModel m(c, "cpu", false, false, DType::F32, TensorParallel{&tp, k.sp});
    m.init_weights(InitScheme::Torchtitan, 5);
    m.set_compute_dtype(k.compute);
    m.set_checkpointing(k.ckpt);
    const double loss = m.forward_backward(b.ids, b.labels, scale, pos);
    const double score = m.forward(b.ids, b.labels, nullptr, pos);
    std::vector<std::pair<std::string, double>> diffs;
    int64_t split = 0;
    for (size_t i = 0; i < m.params().all().size(); ++i) {
      const Param& p = m.params().all()[i];
      const Param& r = ref.params().all()[i];
      if (m.param_specs()[i].placement.tp_dim >= 0) ++split;
      const auto [v, g] = test::gathered_param(tp, m, i);
      diffs.push_back({p.name + " value", test::rel_err(v, r.value)});
      diffs.push_back({p.name + " grad", test::rel_err(g, r.grad)});
    }
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(m.params().all().size(), ref.params().all().size());
    // every mixer and MLP projection of the 4 layers (MoE: each expert's three and the shared
    // expert's), and the embedding
    const int64_t mlp = k.moe ? 3 * c.num_experts + 3 : 3;
    EXPECT_EQ(split, 1 + 3 * 8 + 4 + 4 * mlp) << "split parameters";
    EXPECT_NEAR(loss, ref_loss, std::fabs(ref_loss) * tol) << "rank " << tp.rank();
    EXPECT_NEAR(score, ref_score, std::fabs(ref_score) * tol) << "rank " << tp.rank();
    double worst = 0, worst_gate = 0;
    for (auto& [name, d] : diffs) {
      EXPECT_LE(d, name.find("value") != std::string::npos ? 0.0
                   : gate_path(name)                       ? gate_tol
                                                           : tol)
          << name << " rank " << tp.rank();
      (gate_path(name) ? worst_gate : worst) = std::max(gate_path(name) ? worst_gate : worst, d);
    }
    if (tp.rank() == 0)
      std::printf(
          "[ qwen3_5 tp%d ] loss %.3g relative off one process's, gradients within %.3g of their peak "
          "(the decay gate's %.3g)\n",
          k.tp, std::fabs(loss - ref_loss) / std::fabs(ref_loss), worst, worst_gate);
  });
}

}  // namespace

TEST(TensorParallelQwen3_5, SequenceParallelEqualsOneProcess) { check_case({}); }
TEST(TensorParallelQwen3_5, WithoutSequenceParallel) {
  Case k;
  k.sp = false;
  check_case(k);
}
TEST(TensorParallelQwen3_5, FourRanks) {
  Case k;
  k.tp = 4;
  check_case(k);
  k.sp = false;
  check_case(k);
}
TEST(TensorParallelQwen3_5, ActivationCheckpointingFullAndSelective) {
  Case k;
  k.ckpt = Checkpointing::Full;
  check_case(k);
  k.ckpt = Checkpointing::Selective, k.sp = false;
  check_case(k);
}
TEST(TensorParallelQwen3_5, PackedDocuments) {
  Case k;
  k.packed = true;
  check_case(k);
  k.sp = false, k.tp = 4;
  check_case(k);
}
TEST(TensorParallelQwen3_5, Bf16Matmuls) {
  Case k;
  k.compute = DType::BF16;
  check_case(k);
}

TEST(TensorParallelQwen3_5, MoEExpertsAndSharedExpert) {
  Case k;
  k.moe = true;
  check_case(k);
  k.sp = false, k.ckpt = Checkpointing::Full;
  check_case(k);
}

// A fused tensor split part by part: rank q's shard holds its block of each part, in order, and
// the gather joins them back (against slices taken by hand).
TEST(TensorParallelQwen3_5, SegmentedShardsTakeEachPartsBlock) {
  const std::vector<int64_t> seg = {4, 4, 8};  // q, k, v rows
  Tensor whole = Tensor::empty({16, 3}, DType::F32);
  std::iota(whole.data<float>(), whole.data<float>() + whole.numel(), 0.0f);
  std::mutex mu;
  comm::run_threaded_ranks(2, [&](comm::Comm& tp) {
    const int64_t q = tp.rank();
    Tensor local = Tensor::empty({8, 3}, DType::F32);
    tp_take_shard(whole, 0, q, 2, local, seg);
    Tensor want = Tensor::empty({8, 3}, DType::F32);
    want.slice0(0, 2).copy_(whole.slice0(2 * q, 2 * q + 2));
    want.slice0(2, 4).copy_(whole.slice0(4 + 2 * q, 4 + 2 * q + 2));
    want.slice0(4, 8).copy_(whole.slice0(8 + 4 * q, 8 + 4 * q + 4));
    Tensor back = Tensor::empty({16, 3}, DType::F32);
    tp_gather_shards(tp, local, 0, back, seg);
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(test::rel_err(local, want), 0.0) << "rank " << q;
    EXPECT_EQ(test::rel_err(back, whole), 0.0) << "rank " << q;
  });
  Tensor local = Tensor::empty({8, 3}, DType::F32);
  EXPECT_ERROR_HAS(tp_take_shard(whole, 0, 0, 2, local, std::vector<int64_t>{5, 3, 8}),
                   "tensor parallel: a part of 5 along dim 0");
}

TEST(TensorParallelQwen3_5, Refusals) {
  ModelConfig c = test_config(2);  // 2 KV heads, 4 linear key heads
  comm::run_threaded_ranks(4, [&](comm::Comm& tp) {
    ModelConfig c4 = c;
    c4.num_key_value_heads = 4, c4.linear_num_key_heads = 2, c4.linear_num_value_heads = 4;
    EXPECT_ERROR_HAS(DecoderModel m(c4, "cpu", false, false, DType::F32, TensorParallel{&tp, true}),
                     "linear_num_key_heads = 2 does not divide by [parallelism] tensor_parallel_degree = 4");
  });
  comm::run_threaded_ranks(2, [&](comm::Comm& tp) {
    ModelConfig moe = test_config(2, true);
    moe.shared_expert_intermediate_size = 129;
    EXPECT_ERROR_HAS(
        DecoderModel mm(moe, "cpu", false, false, DType::F32, TensorParallel{&tp, true}),
        "shared_expert_intermediate_size = 129 does not divide by [parallelism] tensor_parallel_degree = 2");
    DecoderModel m(c, "cpu", false, true, DType::F32, TensorParallel{&tp, true});
    LoraConfig lc;
    lc.rank = 4, lc.alpha = 8;
    lc.target_modules = {"model.layers.*.mlp.*_proj"};
    EXPECT_ERROR_HAS(m.enable_lora(lc, 1), "LoRA: with tensor parallelism");
  });
}
