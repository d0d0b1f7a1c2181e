// Where a training run's model state lives and how a step updates it.
//
// Full (one process, or data_parallel_replicate_degree ranks): every rank holds every parameter,
// gradient and AdamW moment; gradients are summed across ranks (distributed/data_parallel.h), then the
// one-process clip and AdamW run. Rank 0 writes checkpoints (whole tensors) and the HF export.
//
// Sharded (data_parallel_shard_degree S > 1; with data_parallel_replicate_degree R > 1 too,
// hybrid: R replicas of an S-rank sharded group, gradients summed across replicas): distributed::Fsdp. The model is built without parameter
// memory and filled one unit at a time (initialised or loaded from the HF folder, identically on
// every rank), each rank keeping its shard of parameters, gradients and moments. Each rank
// writes its own checkpoint files (its pieces); a checkpoint written with any number of ranks
// loads with any other (each rank reads the pieces it owns). The HF export gathers one unit at
// a time while rank 0 streams the tensors to disk.
//
// LoRA ([lora] enable): the base is frozen and the adapters are what is trained, saved and
// stepped. Full: as above with only the adapters' gradients summed. Sharded: the base sharded by
// Fsdp (values only), the adapters whole on every rank with their gradients reduce-scattered and
// their AdamW sharded (sharded_state.cpp). Either way a checkpoint holds the adapters and their
// moments (pieces, any rank count) and names the base folder; the export is a PEFT folder.
#pragma once
#include <memory>
#include <string>

#include "comm/comm.h"
#include "comm/device_mesh.h"
#include "model/hf_checkpoint.h"
#include "model/decoder.h"
#include "ops/adamw/adamw.h"
#include "train/checkpoint.h"
#include "train/job_config.h"

namespace titan::distributed {
class PipelineRunner;
}

namespace titan {

class ModelState {
 public:
  virtual ~ModelState() = default;
  DecoderModel& model() { return *model_; }
  bool loaded_weights() const { return loaded_; }
  virtual bool sharded() const = 0;

  virtual void zero_grad() = 0;
  // After the step's backward passes: sum the gradients over ranks, take the global L2 norm, clip
  // to max_norm (> 0), AdamW. Returns the norm before clipping; a non-finite norm stops the run
  // with an error naming the step and the first non-finite gradient.
  virtual double step(int64_t step, double max_norm, const AdamWParams& hp) = 0;

  // Collective. Writes step st.step (model, AdamW moments, the MoE balancing state) and returns
  // the folder.
  virtual std::string save(CheckpointManager& ckm, const TrainState& st) = 0;
  // Loads step `step` (written with any number of ranks) into this state.
  virtual TrainState load(const CheckpointManager& ckm, int64_t step) = 0;
  // Collective; rank 0 writes the HF folder.
  virtual void export_hf(const std::string& dir, const HfExportOptions& opt) = 0;

  // Per-rank bytes (for the setup line and `titan info`).
  struct Memory {
    int64_t params = 0, grads = 0, optimizer = 0;  // held between steps
    int64_t transient = 0;                          // largest gathered parameters + gradients
    int64_t staging = 0;                            // communication buffers
  };
  virtual Memory memory() const = 0;
  virtual double comm_seconds() const = 0;  // time inside collectives so far
  // Of it, the time the training thread was blocked (collectives it ran, waits for the
  // communication thread); equal to comm_seconds() without a communication thread.
  virtual double comm_wait_seconds() const { return comm_seconds(); }
  // Bytes the parameter all-gathers of a sharded model have assembled on this rank so far.
  virtual int64_t gathered_bytes() const { return 0; }
  // Bytes the model's expert-parallel MoE blocks have sent to other ranks so far (0 without EP).
  int64_t dispatch_bytes() const { return model_->expert_dispatch_bytes(); }
  // Pipeline parallelism: the runtime that trains this rank's stages (null without PP).
  virtual distributed::PipelineRunner* pipeline() { return nullptr; }

 protected:
  std::unique_ptr<DecoderModel> model_;
  bool loaded_ = false;
};

// The model configuration a job describes ([checkpoint] initial_load_path with initial_load_in_hf:
// the HF folder's; else [model] hf_assets_path's config.json; else [model] flavor), overrides
// applied ([model] n_layers, and for qwen3_moe num_experts / top_k); ckpt_out receives the opened
// initial HF checkpoint when the job loads one.
ModelConfig job_model_config(const JobConfig& cfg, std::unique_ptr<HfCheckpoint>* ckpt_out = nullptr);

// The job's model before any state exists: built (deferred: without parameter memory), with the
// means to fill one parameter unit (or all, unit -1) from the initial HF checkpoint or
// torchtitan's init with [training] seed.
struct JobModel {
  std::unique_ptr<DecoderModel> model;
  std::unique_ptr<HfCheckpoint> hf;  // the initial HF checkpoint, when the job loads one
  void fill(int64_t unit, uint64_t seed);
};
// tp: the model's tensor-parallel group (model/tensor_parallel.h; none by default).
// ep: its expert-parallel group (model/expert_parallel.h; none by default).
JobModel build_job_model(const JobConfig& cfg, bool deferred, const TensorParallel& tp = {},
                         const ExpertParallel& ep = {}, const PipelineStages& pp = {});

// [lora] as the model's LoraConfig; and what a LoRA checkpoint records of its adapters and base
// (state.json extra "lora": base, rank, alpha, use_rslora, target_modules as exact module names).
LoraConfig job_lora_config(const JobConfig& cfg);
// base_fingerprint: model/base_fingerprint.h of `base` ("" when the base is not an HF folder).
nlohmann::json lora_checkpoint_record(const DecoderModel& m, const std::string& base, const std::string& base_fingerprint);

// Builds the job's model (job_model_config; weights from [checkpoint] initial_load_path when
// initial_load_in_hf, else torchtitan's init with [training] seed) and its state for the ranks of
// `comm` (sharded or full, from [parallelism]).
std::unique_ptr<ModelState> make_model_state(const JobConfig& cfg, comm::DeviceMesh& mesh);

// Implementations (model_state.cpp, sharded_state.cpp).
std::unique_ptr<ModelState> make_full_state(const JobConfig& cfg, comm::Comm& comm);
std::unique_ptr<ModelState> make_sharded_state(const JobConfig& cfg, comm::DeviceMesh& mesh);

}  // namespace titan
