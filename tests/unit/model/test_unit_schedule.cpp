// The model's unit schedule (model/unit_schedule.h) is what the model does: the hook calls of
// forward and forward_backward, recorded, are the schedule's Need / Prefetch / Done steps in
// order, for dense and MoE, tied and untied models and every checkpointing mode.
#include <gtest/gtest.h>

#include <vector>

#include "model/decoder.h"
#include "model/unit_schedule.h"

using namespace titan;

namespace {

class Recorder final : public UnitHooks {
 public:
  std::vector<UnitStep> steps;
  int passes = 0;
  void need(int64_t u, UnitUse use) override { steps.push_back({UnitStep::Kind::Need, u, use}); }
  void done(int64_t u, UnitUse use) override { steps.push_back({UnitStep::Kind::Done, u, use}); }
  void prefetch(int64_t u) override { steps.push_back({UnitStep::Kind::Prefetch, u}); }
  void end_pass() override { ++passes; }
};

std::vector<UnitStep> hook_steps(const std::vector<UnitStep>& s) {
  std::vector<UnitStep> r;
  for (const UnitStep& x : s)
    if (x.kind != UnitStep::Kind::Run) r.push_back(x);
  return r;
}

std::string str(const std::vector<UnitStep>& s) {
  std::string r;
  for (const UnitStep& x : s) r += step_str(x) + "; ";
  return r;
}

ModelConfig tiny(bool moe, bool tied) {
  ModelConfig c = flavor_config(moe ? "debug-moe" : "debug-tiny");
  c.vocab_size = 96, c.hidden_size = 32, c.intermediate_size = 48, c.num_hidden_layers = 3;
  c.num_attention_heads = 2, c.num_key_value_heads = 1, c.head_dim = 16, c.tie_word_embeddings = tied;
  if (moe) c.moe_intermediate_size = 16, c.num_experts = 4, c.num_experts_per_tok = 2, c.decoder_sparse_step = 2;
  return c;
}

}  // namespace

TEST(UnitSchedule, HookCallsOfBothPassesAreTheSchedule) {
  Tensor ids = Tensor::empty({2, 5}, DType::I64), labels = Tensor::empty({2, 5}, DType::I64);
  for (int64_t i = 0; i < 10; ++i) ids.data<int64_t>()[i] = (i * 7) % 96, labels.data<int64_t>()[i] = (i * 5 + 1) % 96;
  for (bool moe : {false, true})
    for (bool tied : {false, true})
      for (Checkpointing ck : {Checkpointing::None, Checkpointing::Selective, Checkpointing::Full}) {
        SCOPED_TRACE(std::string(moe ? "moe" : "dense") + (tied ? " tied" : " untied") + " ckpt " +
                     std::to_string(int(ck)));
        const ModelConfig c = tiny(moe, tied);
        DecoderModel m(c, "cpu");
        m.init_weights(InitScheme::HF, 1);
        m.set_checkpointing(ck);
        Recorder rec;
        m.set_unit_hooks(&rec);
        m.forward(ids, labels);
        EXPECT_EQ(str(rec.steps), str(hook_steps(unit_schedule(c, Pass::Score))));
        rec.steps.clear();
        m.forward_backward(ids, labels, 0.1f);
        EXPECT_EQ(str(rec.steps), str(hook_steps(unit_schedule(c, Pass::Train, ck))));
        EXPECT_EQ(rec.passes, 2);
        m.set_unit_hooks(nullptr);
      }
}

TEST(UnitSchedule, EveryNeedIsDoneAndEveryUnitRuns) {
  for (bool tied : {false, true})
    for (Pass pass : {Pass::Score, Pass::Train}) {
      const ModelConfig c = tiny(false, tied);
      const auto s = unit_schedule(c, pass, Checkpointing::Full);
      const int64_t units = c.num_hidden_layers + 2;
      std::vector<int> held_v(size_t(units), 0), held_g(size_t(units), 0), fwd(size_t(units), 0), bwd(size_t(units), 0);
      for (const UnitStep& x : s) {
        ASSERT_GE(x.unit, 0);
        ASSERT_LT(x.unit, units) << step_str(x);
        const size_t u = size_t(x.unit);
        // Need makes resident (again: a no-op), Done releases what it names
        if (x.kind == UnitStep::Kind::Need) {
          if (uses(x.use, UnitUse::Values)) held_v[u] = 1;
          if (uses(x.use, UnitUse::Grads)) held_g[u] = 1;
        } else if (x.kind == UnitStep::Kind::Done) {
          EXPECT_TRUE(!uses(x.use, UnitUse::Values) || held_v[u]) << "done without need: " << step_str(x);
          EXPECT_TRUE(!uses(x.use, UnitUse::Grads) || held_g[u]) << "done without need: " << step_str(x);
          if (uses(x.use, UnitUse::Values)) held_v[u] = 0;
          if (uses(x.use, UnitUse::Grads)) held_g[u] = 0;
        } else if (x.kind == UnitStep::Kind::Run) {
          // a unit computes only with its values (or, for the embedding's backward, its grads) held
          EXPECT_TRUE(held_v[u] > 0 || (x.unit == 0 && x.phase == Phase::Backward)) << step_str(x);
          if (x.phase == Phase::Backward) {
            EXPECT_GT(held_g[u], 0) << step_str(x);
          }
          (x.phase == Phase::Forward ? fwd : bwd)[u] += 1;
        }
      }
      for (int64_t u = 0; u < units; ++u) {
        EXPECT_EQ(held_v[size_t(u)], 0) << u;
        EXPECT_EQ(held_g[size_t(u)], 0) << u;
        const bool head = u == units - 1;
        EXPECT_EQ(fwd[size_t(u)], pass == Pass::Score || !head ? 1 : 0) << u;
        // Train: every unit has one backward step (the head's includes its forward), Full
        // checkpointing one recompute step per layer
        EXPECT_EQ(bwd[size_t(u)], pass == Pass::Train ? (u == 0 || head ? 1 : 2) : 0) << u;
      }
      // the embedding announces the first layer (both passes alike)
      ASSERT_GE(s.size(), 2u);
      EXPECT_EQ(step_str(s[1]), "prefetch 1");
    }
}
