// Fsdp (ZeRO-3): training steps with parameters, gradients and AdamW state sharded across the
// ranks equal one process stepping the whole model on the union of the ranks' batches. Runs as
// one process (ctest "distributed": the sharding machinery with one rank, the communication thread
// included) and with 2 and 3 ranks under mpirun (tests/cli/dist_comm.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "core/allocator.h"
#include "comm/comm.h"
#include "unit/distributed/dist_test_util.h"
#include "distributed/fsdp.h"
#include "model/config.h"
#include "model/decoder.h"
#include "ops/cross_entropy/cross_entropy.h"
#include "ops/registry.h"

using namespace titan;
using namespace titan::distributed;

namespace {

ModelConfig tiny(bool moe, bool tied) {
  ModelConfig c = flavor_config(moe ? "debug-moe" : "debug-tiny");
  c.vocab_size = 512, c.hidden_size = 64, c.intermediate_size = 160, c.num_hidden_layers = 3;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.tie_word_embeddings = tied;
  if (moe) c.moe_intermediate_size = 32, c.decoder_sparse_step = 2, c.output_router_logits = true;
  return c;
}

// Rank q's batch of step s: [2, 16] tokens, a few labels ignored.
void batch(int q, int s, const ModelConfig& c, Tensor& ids, Tensor& labels) {
  ids = Tensor::empty({2, 16}, DType::I64);
  labels = Tensor::empty({2, 16}, DType::I64);
  for (int64_t i = 0; i < 32; ++i) {
    ids.data<int64_t>()[i] = (i * 37 + q * 101 + s * 53) % c.vocab_size;
    labels.data<int64_t>()[i] = i % 7 == 3 ? -100 : (i * 11 + q * 29 + s * 17) % c.vocab_size;
  }
}

struct Variant {
  bool moe = false, tied = true, bf16 = false, reshard = true, prefetch = true;
  Checkpointing ckpt = Checkpointing::None;
  int accum = 1;
};

// Two optimizer steps, sharded and in one process; the gathered parameters must agree.
void run(const Variant& v) {
  Comm& comm = test_comm();
  const int n = comm.size(), r = comm.rank();
  const ModelConfig c = tiny(v.moe, v.tied);
  const AdamWKernel& adamw = kernel<AdamWKernel>("cpu");
  DecoderModel ref(c, "cpu");
  ref.init_weights(InitScheme::Torchtitan, 5);
  DecoderModel sharded(c, "cpu", /*deferred=*/true);
  Fsdp::Options o;
  o.reshard_after_forward = v.reshard;
  o.prefetch = v.prefetch;
  Fsdp fsdp(sharded, comm, o, [&](int64_t u) { sharded.init_weights(InitScheme::Torchtitan, 5, u); });
  for (DecoderModel* m : {&ref, &sharded}) {
    m->set_compute_dtype(v.bf16 ? DType::BF16 : DType::F32);
    m->set_checkpointing(v.ckpt);
  }
  std::vector<Tensor> mom_m, mom_v;
  for (auto& p : ref.params().all()) {
    mom_m.push_back(Tensor::zeros(p.value.shape(), DType::F32));
    mom_v.push_back(Tensor::zeros(p.value.shape(), DType::F32));
  }
  for (int step = 1; step <= 2; ++step) {
    AdamWParams hp;
    hp.lr = 0.01f, hp.weight_decay = 0.1f, hp.step = step;
    // Global token count over every rank's micro-batches.
    int64_t count = 0;
    Tensor ids, labels;
    for (int q = 0; q < n; ++q)
      for (int a = 0; a < v.accum; ++a) {
        batch(q, step * 10 + a, c, ids, labels);
        count += count_labels(labels);
      }
    // One process: every rank's micro-batches, one gradient, clip at 1, AdamW.
    ref.params().zero_grad();
    double ref_loss = 0;
    for (int q = 0; q < n; ++q)
      for (int a = 0; a < v.accum; ++a) {
        batch(q, step * 10 + a, c, ids, labels);
        ref_loss += ref.forward_backward(ids, labels, float(1.0 / double(count)));
      }
    double ss = 0;
    for (auto& p : ref.params().all())
      for (int64_t i = 0; i < p.grad.numel(); ++i) ss += double(p.grad.data<float>()[i]) * p.grad.data<float>()[i];
    const double ref_norm = std::sqrt(ss);
    const float coef = float(std::min(1.0, 1.0 / (ref_norm + 1e-6)));
    for (size_t i = 0; i < ref.params().all().size(); ++i) {
      Param& p = ref.params().all()[i];
      for (int64_t k = 0; k < p.grad.numel(); ++k) p.grad.data<float>()[k] *= coef;
      adamw.step(ExecContext::host(), p.value, p.grad, mom_m[i], mom_v[i], hp);
    }
    // Sharded: this rank's micro-batches only.
    fsdp.zero_grad();
    double loss = 0;
    for (int a = 0; a < v.accum; ++a) {
      batch(r, step * 10 + a, c, ids, labels);
      loss += sharded.forward_backward(ids, labels, float(1.0 / double(count)));
    }
    loss = comm.all_reduce_sum(loss);
    EXPECT_NEAR(loss, ref_loss, 1e-5 * std::abs(ref_loss)) << "step " << step;
    const double norm = fsdp.step(1.0, adamw, hp);
    EXPECT_NEAR(norm, ref_norm, 2e-5 * ref_norm) << "step " << step;
  }
  // Between steps no full parameter or gradient is resident.
  for (auto& p : sharded.params().all()) {
    EXPECT_FALSE(p.value.storage()->resident()) << p.name;
    EXPECT_FALSE(p.grad.storage()->resident()) << p.name;
  }
  const float tol = v.bf16 ? 2e-4f : 2e-5f;
  fsdp.for_each_unit_gathered([&](int64_t u) {
    auto [p0, p1] = sharded.unit_params(u);
    for (size_t i = p0; i < p1; ++i) {
      const Param &p = sharded.params().all()[i], &q = ref.params().all()[i];
      for (int64_t k = 0; k < p.value.numel(); ++k)
        ASSERT_NEAR(p.value.data<float>()[k], q.value.data<float>()[k], tol) << p.name << " [" << k << "]";
    }
  });
  // The shard holds this rank's pieces of the reference moments.
  for (const Fsdp::Span& s : fsdp.spans())
    for (int64_t k = 0; k < s.count; ++k)
      ASSERT_NEAR(fsdp.exp_avg().data<float>()[s.local + k], mom_m[s.param].data<float>()[s.offset + k], 1e-6f)
          << ref.params().all()[s.param].name;
}

}  // namespace

TEST(Fsdp, DenseTiedMatchesOneProcess) { run({}); }
TEST(Fsdp, DenseUntiedWithAccumulation) {
  Variant v;
  v.tied = false, v.accum = 2;
  run(v);
}
TEST(Fsdp, KeepAfterForwardNoPrefetchFullCheckpointing) {
  Variant v;
  v.reshard = false, v.prefetch = false, v.ckpt = Checkpointing::Full;
  run(v);
}
TEST(Fsdp, Bf16Compute) {
  Variant v;
  v.bf16 = true;
  run(v);
}
TEST(Fsdp, MoEWithAuxLoss) {
  Variant v;
  v.moe = true, v.tied = false, v.ckpt = Checkpointing::Selective;
  run(v);
}

TEST(Fsdp, SpansCoverEveryParameterOnceAcrossRanks) {
  Comm& comm = test_comm();
  const ModelConfig c = tiny(false, false);
  DecoderModel m(c, "cpu", true);
  Fsdp fsdp(m, comm, {}, [&](int64_t u) { m.init_weights(InitScheme::HF, 1, u); });
  // Every rank's count per parameter, summed over ranks, is the parameter's size.
  std::vector<double> counts(m.params().all().size(), 0.0);
  for (auto& s : fsdp.spans()) counts[s.param] += double(s.count);
  for (size_t i = 0; i < counts.size(); ++i)
    EXPECT_EQ(comm.all_reduce_sum(counts[i]), double(m.params().all()[i].value.numel())) << m.params().all()[i].name;
  // The shard is about 1/N of the model (padding: under one element per unit per rank).
  EXPECT_LE(fsdp.shard_bytes() / 4 * comm.size(), m.params().numel() + comm.size() * m.num_units());
  EXPECT_GE(fsdp.shard_bytes() / 4 * comm.size(), m.params().numel());
}

namespace {

// Sums the full (gathered) parameter and gradient memory resident after every hook call.
class Measure final : public UnitHooks {
 public:
  Measure(Fsdp& f, ParamStore& ps) : f_(f) {
    std::set<Storage*> seen;
    for (Param& p : ps.all())
      for (Tensor* t : {&p.value, &p.grad})
        if (t->defined() && seen.insert(t->storage().get()).second) storages_.push_back(t->storage());
  }
  void need(int64_t u, UnitUse use) override { f_.need(u, use), note(); }
  void done(int64_t u, UnitUse use) override { f_.done(u, use), note(); }
  void prefetch(int64_t u) override { f_.prefetch(u), note(); }
  void end_pass() override { f_.end_pass(); }
  size_t peak = 0;

 private:
  void note() {
    size_t live = 0;
    for (const auto& s : storages_) live += s->resident() ? s->bytes() : 0;
    peak = std::max(peak, live);
  }
  Fsdp& f_;
  std::vector<std::shared_ptr<Storage>> storages_;
};

}  // namespace

// FsdpPlan::transient_bytes replays the model's schedule with Fsdp's rules; without the
// communication thread (every collective inline, so no timing) it is exactly what a step holds.
TEST(Fsdp, PlanReplayOfTheScheduleIsWhatAStepGathers) {
  Comm& comm = test_comm();
  // frozen: a LoRA base (values only; the tied embedding is still freed at the head), its matmul
  // weights in f32 or in bf16 (2 bytes each).
  for (const auto& [frozen, wdt] : {std::pair{false, DType::F32}, {true, DType::F32}, {true, DType::BF16}})
    for (bool tied : {false, true})
      for (bool reshard : {false, true}) {
        const ModelConfig c = tiny(false, tied);
        DecoderModel m(c, "cpu", true, frozen, wdt);
        Fsdp::Options o;
        o.reshard_after_forward = reshard, o.prefetch = false;
        Fsdp fsdp(m, comm, o, [&](int64_t u) { m.init_weights(InitScheme::HF, 1, u); });
        Measure measure(fsdp, m.params());
        m.set_unit_hooks(&measure);
        Tensor ids, labels;
        batch(comm.rank(), 0, c, ids, labels);
        m.forward_backward(ids, labels, 0.01f);
        EXPECT_EQ(measure.peak, size_t(fsdp.plan().transient_bytes(reshard, false)))
            << "tied " << tied << " reshard " << reshard << " frozen " << frozen << " " << dtype_name(wdt);
        EXPECT_EQ(fsdp.frozen(), frozen);
        m.set_unit_hooks(&fsdp);
      }
}

namespace {

// LoRA on a frozen base with bf16 matmul weights (docs/lora.md, "bf16 base"), sharded: the shards
// hold the bf16 bytes, a gather gives back exactly the whole bf16 model's weights, and a LoRA
// pass over the sharded base equals one process's on every rank's batch.
void run_bf16_base(bool tied, bool prefetch, Checkpointing ckpt) {
  Comm& comm = test_comm();
  const int n = comm.size(), r = comm.rank();
  const ModelConfig c = tiny(false, tied);
  LoraConfig lc;
  lc.rank = 4, lc.alpha = 8, lc.target_modules = {"model.layers.*.self_attn.[qkvo]_proj", "model.layers.*.mlp.*_proj"};
  // The whole bf16 base (initialised in f32, rounded once), as one process holds it.
  DecoderModel ref(c, "cpu", false, /*frozen=*/true, DType::BF16);
  ref.init_weights(InitScheme::Torchtitan, 5);
  DecoderModel sharded(c, "cpu", /*deferred=*/true, /*frozen=*/true, DType::BF16);
  Fsdp::Options o;
  o.prefetch = prefetch;
  Fsdp fsdp(sharded, comm, o, [&](int64_t u) { sharded.init_weights(InitScheme::Torchtitan, 5, u); });
  // The value shard is the bf16 bytes: the plan's, and smaller than an f32 base's by the weights' half.
  const FsdpPlan f32_plan = fsdp_plan(c, n, true, DType::F32);
  EXPECT_EQ(fsdp.shard_bytes(), fsdp_plan(c, n, true, DType::BF16).shard_bytes);
  int64_t weight_bytes = 0;  // the bf16 matmul weights' bytes
  for (auto& p : ref.params().all())
    if (p.value.dtype() == DType::BF16) weight_bytes += int64_t(p.value.nbytes());
  EXPECT_GT(weight_bytes, 0);
  EXPECT_LE(fsdp.shard_bytes() * n, f32_plan.shard_bytes * n - weight_bytes + 8 * n * sharded.num_units());
  EXPECT_TRUE(fsdp.spans().empty());
  // Gathered, every unit is the whole model's values, bit for bit, in their dtypes.
  fsdp.for_each_unit_gathered([&](int64_t u) {
    auto [p0, p1] = sharded.unit_params(u);
    for (size_t i = p0; i < p1; ++i) {
      const Param &p = sharded.params().all()[i], &q = ref.params().all()[i];
      ASSERT_EQ(p.value.dtype(), q.value.dtype()) << p.name;
      ASSERT_EQ(0, std::memcmp(p.value.raw(), q.value.raw(), p.value.nbytes())) << p.name;
    }
  });
  // Adapters: the same on both (B made non-zero so that A's gradient is too).
  for (DecoderModel* m : {&ref, &sharded}) {
    m->enable_lora(lc, 7);
    for (auto& p : m->lora_params().all())
      if (p.name.find("lora_B") != std::string::npos)
        for (int64_t k = 0; k < p.value.numel(); ++k) p.value.data<float>()[k] = 0.01f * float((k * 7 + 3) % 11 - 5);
    m->set_checkpointing(ckpt);
    EXPECT_EQ(m->compute_dtype(), DType::BF16);
  }
  Tensor ids, labels;
  int64_t count = 0;
  for (int q = 0; q < n; ++q) batch(q, 1, c, ids, labels), count += count_labels(labels);
  ref.lora_params().zero_grad();
  double ref_loss = 0;
  for (int q = 0; q < n; ++q) {
    batch(q, 1, c, ids, labels);
    ref_loss += ref.forward_backward(ids, labels, float(1.0 / double(count)));
  }
  sharded.lora_params().zero_grad();
  const int64_t gathered0 = fsdp.gathered_bytes();
  batch(r, 1, c, ids, labels);
  const double loss = comm.all_reduce_sum(sharded.forward_backward(ids, labels, float(1.0 / double(count))));
  EXPECT_NEAR(loss, ref_loss, 1e-5 * std::abs(ref_loss));
  // Summed over ranks, the adapters' gradients are the one-process ones (up to f32 summation order).
  for (size_t i = 0; i < ref.lora_params().all().size(); ++i) {
    const Param &p = sharded.lora_params().all()[i], &q = ref.lora_params().all()[i];
    Tensor g = Tensor::empty(p.grad.shape(), DType::F32);
    g.copy_(p.grad);
    comm.all_reduce(g.data<float>(), g.numel(), ReduceOp::Sum);
    float peak = 0;
    for (int64_t k = 0; k < g.numel(); ++k) peak = std::max(peak, std::abs(q.grad.data<float>()[k]));
    ASSERT_GT(peak, 0.0f) << p.name;
    for (int64_t k = 0; k < g.numel(); ++k)
      ASSERT_NEAR(g.data<float>()[k], q.grad.data<float>()[k], 1e-5f * peak) << p.name << " [" << k << "]";
  }
  // Nothing of the base stays gathered between passes; the pass's gathers moved bf16 weights: with
  // every unit gathered at least once and the layers twice, under 0.6 x the bytes of f32 weights.
  for (auto& p : sharded.params().all()) EXPECT_FALSE(p.value.storage()->resident()) << p.name;
  const int64_t moved = fsdp.gathered_bytes() - gathered0;
  int64_t f32_layers = 0;
  for (int64_t u = 1; u <= c.num_hidden_layers; ++u) f32_layers += f32_plan.unit_bytes[size_t(u)];
  EXPECT_GE(moved, f32_layers);  // each layer's bf16 bytes twice (forward, backward) at least
  EXPECT_LT(moved, 2 * f32_layers * 6 / 10 + f32_plan.unit_bytes[0] + f32_plan.unit_bytes.back() + 16 * n * sharded.num_units());
}

}  // namespace

TEST(Fsdp, Bf16FrozenBaseTiedMatchesOneProcess) { run_bf16_base(true, true, Checkpointing::None); }
TEST(Fsdp, Bf16FrozenBaseUntiedNoPrefetchFullCheckpointing) { run_bf16_base(false, false, Checkpointing::Full); }
