// Context parallelism in the decoder (model/context_parallel.h): cp ranks each given their chunks
// of every sequence give one process's loss (summed over cp), and their gradients summed over cp
// equal one process's, for head-tail and plain chunking, cp 2 and 4, each family's layout
// (qwen3: q/k norms, tied head; llama: untied; qwen2: biases), packed documents cut by chunk
// borders, activation checkpointing, bf16 matmuls, MoE layers, and cp x tp meshes; what it does
// not run is refused in one line.
#include <gtest/gtest.h>

#include <cmath>
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

struct Case {
  std::string model_type = "qwen3";
  bool tied = true, packed = false, moe = false, head_tail = true, sp = true;
  Checkpointing ckpt = Checkpointing::None;
  DType compute = DType::F32;
  int cp = 2, tp = 1;
};

void check_case(const Case& k) {
  ModelConfig c = flavor_config("debug-tiny");  // 4 heads, 2 KV heads, vocab 512, MLP 160
  c.model_type = k.model_type;
  c.tie_word_embeddings = k.tied;
  if (k.moe) {  // every layer sparse: 4 experts of 32, top-2 (no auxiliary loss: refused under cp)
    c.model_type = "qwen3_moe";
    c.num_experts = 4, c.num_experts_per_tok = 2, c.moe_intermediate_size = 32, c.norm_topk_prob = true;
  }
  const int64_t B = 2, S = 48;
  const Batch b = make_batch(c, B, S, k.packed ? std::vector<int64_t>{5, S / 2 + 3} : std::vector<int64_t>{});
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
  comm::run_threaded_ranks(k.cp * k.tp, [&](comm::Comm& world) {
    // Mesh [cp, tp], tp fastest.
    const int w = world.rank();
    auto cpg = world.split(w % k.tp, w / k.tp), tpg = world.split(w / k.tp, w % k.tp);
    const ContextParallel cp{cpg.get(), k.head_tail};
    DecoderModel m(c, "cpu", false, false, DType::F32, TensorParallel{tpg.get(), k.sp});
    m.init_weights(InitScheme::Torchtitan, 5);
    m.set_compute_dtype(k.compute);
    m.set_checkpointing(k.ckpt);
    m.set_context_parallel(cp);
    const Tensor ids = cp_take_sequence(b.ids, cp), labels = cp_take_sequence(b.labels, cp);
    const Tensor lpos = k.packed ? cp_take_sequence(b.positions, cp) : Tensor();
    const double loss = cpg->all_reduce_sum(m.forward_backward(ids, labels, scale, k.packed ? &lpos : nullptr));
    const double score = cpg->all_reduce_sum(m.forward(ids, labels, nullptr, k.packed ? &lpos : nullptr));
    std::vector<std::pair<std::string, double>> diffs;
    for (size_t i = 0; i < m.params().all().size(); ++i) {
      const Param& p = m.params().all()[i];
      const Param& r = ref.params().all()[i];
      const ParamSpec& s = m.param_specs()[i];
      Tensor g = p.grad.clone();  // this rank's tokens' share: summed over cp
      cpg->all_reduce(g.data<float>(), g.numel(), comm::ReduceOp::Sum);
      if (k.tp > 1 && s.placement.tp_dim >= 0) {
        Tensor whole = Tensor::empty(Shape(s.shape), DType::F32);
        tp_gather_shards(*tpg, g, s.placement.tp_dim, whole, s.placement.tp_segments);
        g = whole;
      }
      diffs.push_back({p.name + " grad", test::rel_err(g, r.grad)});
    }
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_NEAR(loss, ref_loss, std::fabs(ref_loss) * tol) << "rank " << w;
    EXPECT_NEAR(score, ref_score, std::fabs(ref_score) * tol) << "rank " << w;
    for (auto& [name, d] : diffs) EXPECT_LE(d, tol) << name << " rank " << w;
  });
}

}  // namespace

TEST(ContextParallel, ChunksOfEachLayout) {
  auto str = [](const std::vector<SeqChunk>& v) {
    std::string s;
    for (const SeqChunk& c : v) s += std::to_string(c.local) + ":" + std::to_string(c.global) + "+" + std::to_string(c.len) + " ";
    return s;
  };
  EXPECT_EQ(str(cp_chunks(16, 2, 0, true)), "0:0+4 4:12+4 ");
  EXPECT_EQ(str(cp_chunks(16, 2, 1, true)), "0:4+4 4:8+4 ");
  EXPECT_EQ(str(cp_chunks(16, 4, 3, true)), "0:6+2 2:8+2 ");
  EXPECT_EQ(str(cp_chunks(16, 4, 1, false)), "0:4+4 ");
  EXPECT_ERROR_HAS(cp_chunks(12, 4, 0, true), "a sequence of 12 tokens ([training] seq_len) does not divide into 8 chunks");
  // The ranks' chunks tile the sequence once.
  for (bool ht : {true, false})
    for (int64_t n : {2, 3, 4}) {
      std::vector<int> seen(24, 0);
      for (int64_t r = 0; r < n; ++r)
        for (const SeqChunk& c : cp_chunks(24, n, r, ht))
          for (int64_t i = 0; i < c.len; ++i) ++seen[size_t(c.global + i)];
      for (int s : seen) EXPECT_EQ(s, 1) << n << (ht ? " headtail" : " none");
    }
}

TEST(ContextParallel, Qwen3HeadTailEqualsOneProcess) { check_case({}); }
TEST(ContextParallel, Qwen3WithoutLoadBalancing) {
  Case k;
  k.head_tail = false;
  check_case(k);
}
TEST(ContextParallel, FourRanks) {
  Case k;
  k.cp = 4;
  check_case(k);
}
TEST(ContextParallel, LlamaUntiedHeadAndQwen2Biases) {
  Case k;
  k.model_type = "llama", k.tied = false;
  check_case(k);
  k.model_type = "qwen2";
  check_case(k);
}
TEST(ContextParallel, PackedDocumentsAcrossChunkBorders) {
  Case k;
  k.packed = true;
  check_case(k);
  k.head_tail = false, k.cp = 4;
  check_case(k);
}
TEST(ContextParallel, ActivationCheckpointingAndBf16) {
  Case k;
  k.ckpt = Checkpointing::Full;
  check_case(k);
  k.ckpt = Checkpointing::Selective;
  check_case(k);
  k.ckpt = Checkpointing::None, k.compute = DType::BF16;
  check_case(k);
}
TEST(ContextParallel, MoE) {
  Case k;
  k.moe = true;
  check_case(k);
}
TEST(ContextParallel, WithTensorParallelism) {
  Case k;
  k.tp = 2;
  check_case(k);  // sequence parallel over each cp rank's tokens
  k.sp = false, k.packed = true;
  check_case(k);
}

TEST(ContextParallel, Refusals) {
  comm::run_threaded_ranks(2, [&](comm::Comm& cp) {
    {
      ModelConfig c = flavor_config("debug-qwen3_5");
      DecoderModel m(c, "cpu", true);
      EXPECT_ERROR_HAS(m.set_context_parallel({&cp, true}), "context parallelism: not for qwen3_5");
    }
    {
      ModelConfig c = flavor_config("debug-tiny");
      c.model_type = "qwen3_moe";
      c.num_experts = 4, c.num_experts_per_tok = 2, c.moe_intermediate_size = 32;
      c.output_router_logits = true;
      DecoderModel m(c, "cpu", true);
      EXPECT_ERROR_HAS(m.set_context_parallel({&cp, true}), "the router auxiliary loss");
    }
    ModelConfig c = flavor_config("debug-tiny");
    DecoderModel m(c);
    m.init_weights(InitScheme::Torchtitan, 1);
    m.set_context_parallel({&cp, true});
    const Batch b = make_batch(c, 1, 6);  // a local sequence of 6: 12 tokens in 4 chunks of 3
    EXPECT_NO_THROW(m.forward_backward(b.ids, b.labels, 1.0f));
    const Batch odd = make_batch(c, 1, 5);  // 10 tokens do not cut into 4 chunks
    EXPECT_ERROR_HAS(m.forward_backward(odd.ids, odd.labels, 1.0f), "does not divide into 4 chunks");
  });
}
