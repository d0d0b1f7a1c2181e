#include "distributed/step_memory.h"

#include <algorithm>

#include "core/error.h"
#include "distributed/data_parallel.h"
#include "distributed/fsdp.h"
#include "model/param_spec.h"

namespace titan::distributed {

namespace {

std::string describe_run(const UnitStep& s, int64_t layers) {
  if (s.unit == 0) return s.phase == Phase::Forward ? "embedding forward" : "embedding backward";
  if (s.unit == layers + 1) return "head (lm_head + cross-entropy, forward and backward)";
  const char* what = s.phase == Phase::Forward ? "forward" : s.phase == Phase::Recompute ? "recompute" : "backward";
  return "layer " + std::to_string(s.unit - 1) + " " + what;
}

}  // namespace

RankStepMemory predict_rank_step_memory(const ModelConfig& c, const MeshStep& m) {
  TITAN_CHECK(m.dp_replicate >= 1 && m.dp_shard >= 1 && m.cp >= 1 && m.tp >= 1 && m.batch >= 1 && m.seq >= 1,
              "step memory: degrees, batch and seq_len must be positive");
  RankStepMemory r;
  const int64_t fsdp = m.dp_shard * m.cp;
  r.sharded = fsdp > 1 || m.tp > 1;
  if (!r.sharded) {  // one process, or replicas of it (model_state.cpp's FullState)
    const TrainMemory t = predict_train_memory(c, m.batch, m.seq, m.ckpt, m.compute, nullptr);
    r.params = t.weights - t.rope, r.grads = t.grads, r.optimizer = t.optimizer, r.rope = t.rope;
    if (m.dp_replicate > 1) {  // DataParallel: N x bucket staging and the reduced chunk
      const int64_t n = m.dp_replicate, chunk = (model_param_count(c) + n - 1) / n;
      r.staging = 4 * (n * std::max<int64_t>(1, std::min(chunk, DataParallel::kBucket)) + chunk);
    }
    r.activations = t.activations;
    r.peak = r.state() + r.rope + r.activations;
    r.at = "head or the last layer's backward (one process's formula)";
    return r;
  }
  // As train/sharded_state.cpp's fsdp_options: no prefetch thread under tensor parallelism.
  r.prefetch = m.prefetch && m.tp == 1;
  StepLayout lay;
  lay.tp = m.tp, lay.sequence_parallel = m.sequence_parallel, lay.cp = m.cp, lay.head_tail = m.head_tail;
  const StepTimeline t = train_step_timeline(c, m.batch, m.seq, m.ckpt, m.compute, lay);
  FsdpPlan plan = fsdp_plan(c, fsdp, false, DType::F32, m.tp);
  plan.schedule = unit_schedule(c, Pass::Train, m.ckpt);  // the pass the model runs (recomputation steps)
  const std::vector<int64_t> gathered = plan.resident_at_runs(m.reshard_after_forward, r.prefetch);
  TITAN_ASSERT(gathered.size() == t.activations.size(), "step memory: the FSDP replay and the activations disagree");
  r.params = r.grads = plan.shard_bytes;
  r.optimizer = 2 * plan.shard_bytes;
  r.staging = plan.staging_bytes;
  r.rope = t.rope;
  int64_t best = -1;
  for (size_t i = 0; i < gathered.size(); ++i) {
    const int64_t a = t.activations[i] + t.weight_copies[i];
    if (gathered[i] + a <= best) continue;
    best = gathered[i] + a;
    r.gathered = gathered[i], r.activations = a, r.at = describe_run(t.runs[i], c.num_hidden_layers);
  }
  r.peak = r.state() + r.rope + best;
  return r;
}

}  // namespace titan::distributed
