// A rank's predicted step peak (distributed/step_memory.h) as a sum over the compute steps of the
// training pass: its parts add up, one rank of every degree 1 is one process's prediction, the
// per-step activations follow the model's schedule, and what it does not cover is refused by name.
// (Against the allocator's measured peak under mpirun: tests/cli/dist_step_memory.sh; threaded
// ranks share one process's allocator, so they cannot measure a rank.)
#include <gtest/gtest.h>

#include <algorithm>

#include "distributed/fsdp.h"
#include "distributed/step_memory.h"
#include "model/train_memory.h"

using namespace titan;
using namespace titan::distributed;

namespace {

ModelConfig wide(bool tied = true) {
  ModelConfig c = flavor_config("debug-tiny");
  c.hidden_size = 256, c.intermediate_size = 768, c.num_hidden_layers = 3, c.vocab_size = 1040;
  c.num_attention_heads = 8, c.num_key_value_heads = 4, c.head_dim = 32, c.max_position_embeddings = 4096;
  c.tie_word_embeddings = tied;
  return c;
}

std::string what(const MeshStep& m) {
  return "dp_shard " + std::to_string(m.dp_shard) + " cp " + std::to_string(m.cp) + " tp " + std::to_string(m.tp) +
         " sp " + std::to_string(m.sequence_parallel) + " ckpt " + std::to_string(int(m.ckpt)) + " " +
         dtype_name(m.compute);
}

}  // namespace

TEST(StepMemory, OneProcessIsTheSingleProcessPrediction) {
  const ModelConfig c = wide();
  for (Checkpointing ck : {Checkpointing::None, Checkpointing::Selective, Checkpointing::Full})
    for (DType d : {DType::F32, DType::BF16}) {
      MeshStep m;
      m.batch = 2, m.seq = 512, m.ckpt = ck, m.compute = d;
      const RankStepMemory r = predict_rank_step_memory(c, m);
      const TrainMemory t = predict_train_memory(c, 2, 512, ck, d, nullptr);
      EXPECT_FALSE(r.sharded);
      EXPECT_EQ(r.peak, t.total()) << what(m);
      // Replicas add DataParallel's staging and reduced chunk, nothing else.
      m.dp_replicate = 2;
      EXPECT_GT(predict_rank_step_memory(c, m).peak, r.peak);
      EXPECT_EQ(predict_rank_step_memory(c, m).peak - predict_rank_step_memory(c, m).staging, r.peak);
    }
}

TEST(StepMemory, TimelineFollowsTheTrainingSchedule) {
  const ModelConfig c = wide();
  for (Checkpointing ck : {Checkpointing::None, Checkpointing::Selective, Checkpointing::Full}) {
    size_t runs = 0;
    for (const UnitStep& s : unit_schedule(c, Pass::Train, ck)) runs += s.kind == UnitStep::Kind::Run;
    const StepTimeline t = train_step_timeline(c, 2, 512, ck, DType::F32, StepLayout{});
    ASSERT_EQ(t.runs.size(), runs);
    ASSERT_EQ(t.activations.size(), runs);
    // One process's formula keeps the last layer's output through its backward: an upper bound.
    const int64_t most = *std::max_element(t.activations.begin(), t.activations.end());
    EXPECT_LE(most, predict_train_memory(c, 2, 512, ck, DType::F32, nullptr).activations);
    EXPECT_GT(most, predict_train_memory(c, 2, 512, ck, DType::F32, nullptr).activations * 9 / 10);
  }
  // Less kept, less at the largest step.
  auto most = [&](Checkpointing ck, StepLayout l) {
    const StepTimeline t = train_step_timeline(c, 2, 1024, ck, DType::F32, l);
    return *std::max_element(t.activations.begin(), t.activations.end());
  };
  EXPECT_GT(most(Checkpointing::None, {}), most(Checkpointing::Selective, {}));
  EXPECT_GT(most(Checkpointing::Selective, {}), most(Checkpointing::Full, {}));
  // tp2 and cp2 each hold about half the activations; sequence parallelism less than without it.
  EXPECT_LT(most(Checkpointing::None, {2, true, 1}), most(Checkpointing::None, {}) * 6 / 10);
  EXPECT_LT(most(Checkpointing::None, {2, true, 1}), most(Checkpointing::None, {2, false, 1}));
  EXPECT_LT(most(Checkpointing::None, {1, true, 2}), most(Checkpointing::None, {}) * 6 / 10);
}

TEST(StepMemory, ShardedRankIsStatePlusTheLargestStep) {
  for (bool tied : {true, false})
    for (int64_t tp : {1, 2})
      for (int64_t cp : {1, 2})
        for (int64_t dp : {1, 2})
          for (Checkpointing ck : {Checkpointing::None, Checkpointing::Full}) {
            if (tp * cp * dp == 1) continue;
            const ModelConfig c = wide(tied);
            MeshStep m;
            m.dp_shard = dp, m.cp = cp, m.tp = tp, m.batch = 2, m.seq = 512, m.ckpt = ck;
            const RankStepMemory r = predict_rank_step_memory(c, m);
            EXPECT_TRUE(r.sharded);
            EXPECT_EQ(r.prefetch, tp == 1) << what(m);  // as the trainer: no prefetch thread under tp
            const FsdpPlan plan = fsdp_plan(c, dp * cp, false, DType::F32, tp);
            EXPECT_EQ(r.params, plan.shard_bytes);
            EXPECT_EQ(r.state(), 4 * plan.shard_bytes + plan.staging_bytes);
            EXPECT_EQ(r.peak, r.state() + r.rope + r.gathered + r.activations) << what(m);
            // The gathered units at the peak's step are at most the most a step gathers.
            EXPECT_LE(r.gathered, plan.transient_bytes(true, tp == 1)) << what(m);
            EXPECT_FALSE(r.at.empty());
            // HSDP replicas hold what one shard group's rank holds.
            m.dp_replicate = 2;
            EXPECT_EQ(predict_rank_step_memory(c, m).peak, r.peak);
          }
}

TEST(StepMemory, ReplayAtComputeStepsPeaksAtTheTransientBytes) {
  for (bool tied : {true, false})
    for (bool reshard : {true, false})
      for (bool prefetch : {true, false}) {
        const FsdpPlan p = fsdp_plan(wide(tied), 4, false, DType::F32, 2);
        const std::vector<int64_t> at = p.resident_at_runs(reshard, prefetch);
        EXPECT_EQ(*std::max_element(at.begin(), at.end()), p.transient_bytes(reshard, prefetch));
        // The head's step holds the head unit with its gradients (and a tied embedding's).
        const size_t head = size_t(wide().num_hidden_layers) + 1;
        const int64_t head_units = 2 * p.unit_bytes.back() + (tied ? 2 * p.unit_bytes[0] : 0);
        EXPECT_GE(at[head], head_units);
      }
}

TEST(StepMemory, Refusals) {
  auto msg = [](const ModelConfig& c, MeshStep m) {
    try {
      predict_rank_step_memory(c, m);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  MeshStep m;
  m.tp = 2, m.seq = 512;
  EXPECT_NE(msg(flavor_config("debug-moe"), m).find("not yet qwen3_moe"), std::string::npos);
  m.tp = 1, m.cp = 2, m.seq = 510;
  EXPECT_NE(msg(wide(), m).find("does not divide by 2 cp"), std::string::npos);
  m.cp = 1, m.tp = 3, m.seq = 512;
  EXPECT_NE(msg(wide(), m).find("num_key_value_heads = 4 does not divide by tp = 3"), std::string::npos);
}
