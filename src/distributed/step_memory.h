// One rank's predicted peak memory in a training step on a device mesh (dp_replicate x dp_shard x
// cp x tp), for `titan info` (what the allocator's peak of the largest rank counts,
// metrics.jsonl's memory_peak_max_rank_gib; tests/cli/dist_step_memory.sh holds the two together).
//
// Sharded path (fsdp = dp_shard x cp > 1, or tp > 1; train/sharded_state.cpp): between steps the
// rank holds its FSDP shards of the tp rank's local tensors (values, gradients, both AdamW
// moments: 4 x the shard) and the collectives' staging buffers (distributed::fsdp_plan). During
// the step, at each compute step of the training pass, it holds on top of that the units FSDP
// has gathered then (their values, and gradients while their backward runs: the plan's replay of
// the schedule, FsdpPlan::resident_at_runs), the RoPE tables, and the activations of that moment
// (model/train_memory.h's train_step_timeline: local widths under tp, S/cp tokens and the K/V
// gathers under cp, the head's vocabulary shard, the checkpointing mode). The peak is the largest
// sum over the compute steps: the gathered units and the activations peak at different moments
// (the tied embedding with its gradient at the head, where the logits chunk is), so their maxima
// are not added.
//
// One process (every degree 1) and plain replication (dp_replicate only): predict_train_memory,
// plus DataParallel's staging and reduced chunk for replication.
#pragma once
#include <cstdint>
#include <string>

#include "model/config.h"
#include "model/train_memory.h"
#include "model/unit_schedule.h"

namespace titan::distributed {

struct MeshStep {
  int64_t dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1;
  bool sequence_parallel = true;  // [parallelism] enable_sequence_parallel (tp > 1)
  bool head_tail = true;          // [parallelism] context_parallel_load_balancer = "headtail" (else "none")
  bool reshard_after_forward = true;  // fsdp_reshard_after_forward
  bool prefetch = true;  // fsdp_prefetch as configured (the trainer turns it off under tp, as here)
  int64_t batch = 1;     // local_batch_size: the rows of a micro-batch on this rank's batch coordinate
  int64_t seq = 2048;    // seq_len: the whole sequence (a cp rank holds seq / cp tokens of it)
  Checkpointing ckpt = Checkpointing::None;
  DType compute = DType::F32;  // mixed_precision_param: bf16 GEMMs
};

struct RankStepMemory {
  bool sharded = true;
  bool prefetch = false;  // as the trainer runs it
  // Between steps: FSDP's value, gradient and moment shards (each `params` bytes on the sharded
  // path; the whole model's f32 values, gradients and moments otherwise) and the staging buffers.
  int64_t params = 0, grads = 0, optimizer = 0, staging = 0;
  int64_t rope = 0;
  // At the peak: the gathered units (with their gradients), the activations (with a bf16 layer copy).
  int64_t gathered = 0, activations = 0;
  int64_t peak = 0;
  std::string at;  // the compute step of the peak: "head", "layer 3 backward", ...
  int64_t state() const { return params + grads + optimizer + staging; }
};

RankStepMemory predict_rank_step_memory(const ModelConfig& cfg, const MeshStep& mesh);

}  // namespace titan::distributed
