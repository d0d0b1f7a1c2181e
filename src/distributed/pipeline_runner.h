// The pipeline-parallel runtime: walks this rank's action list of a schedule (pp_schedule.h) on a
// model that holds the rank's stages (model/pipeline.h), one training step at a time. Forward and
// backward run DecoderModel::stage_forward / stage_backward on the microbatch they name; sends
// and receives move the stage borders' activations ([rows x seq, hidden] f32) and their gradients
// over the pp group (Comm::send is buffered, as the schedules assume); two consecutive stages on
// one rank hand them over in memory. Unshard / Reshard are markers here: the model's FSDP hooks
// gather and free each unit inside every stage pass (distributed/fsdp.h), so every microbatch's
// forward and backward gathers its units again (as gradient accumulation does without PP).
//
// Each microbatch's saved activations live from its forward to its backward, so a rank holds as
// many as its schedule keeps in flight (GPipe: all of them; 1F1B: at most pp - rank).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "core/tensor.h"
#include "distributed/pp_schedule.h"
#include "model/decoder.h"

namespace titan::distributed {

class PipelineRunner {
 public:
  // pp: the mesh's pp group (rank r runs schedule.ranks[r]).
  PipelineRunner(DecoderModel& model, comm::Comm& pp, PpSchedule schedule);

  struct Microbatch {
    Tensor ids, labels;           // [rows, seq] i64
    const Tensor* positions = nullptr;
    // LoRA dropout (DecoderModel::set_lora_dropout_rows): the optimizer step, and the index of the
    // microbatch's first row in the step's global batch.
    int64_t lora_step = 0, lora_row0 = 0;
  };
  // One step: every microbatch forward and backward through this rank's stages (exactly the
  // schedule's count of them); parameter gradients of grad_scale x the loss sum accumulate.
  // Returns the loss sum of the microbatches on the rank that holds the last stage, 0 elsewhere.
  double run(const std::vector<Microbatch>& microbatches, float grad_scale);

  const PpSchedule& schedule() const { return schedule_; }
  // The last run's seconds in forwards and backwards, and in all (the rest: waiting for
  // receives, sending, bookkeeping): 1 - compute / total is this rank's measured bubble.
  double compute_seconds() const { return compute_s_; }
  double run_seconds() const { return run_s_; }

 private:
  DecoderModel& model_;
  comm::Comm& pp_;
  PpSchedule schedule_;
  double compute_s_ = 0, run_s_ = 0;
};

}  // namespace titan::distributed
