// The training loop behind `titan train`: one entry point for the three ways to build a model
// (an HF folder, a built-in flavor, either with kernel replacements).
//
// A step: for each micro-batch (global batch / (local batch x data-parallel degree) of them)
// forward + backward with gradients of the token-mean loss over the whole global batch
// accumulated; global L2 norm and clipping; a non-finite check; AdamW with the step's lr; metrics.
// Checkpoints at [checkpoint] interval and on SIGINT/SIGTERM; an HF export at the end when asked.
//
// As torchtitan's trainer, in named steps:
//   Trainer(cfg, comm)       setup: run folders, model state, data, lr schedule, checkpoint
//                            manager and resume, metrics (each its own member function);
//   train()                  the loop: train_step(), then the stop poll, then every hook's
//                            on_step_end; on_train_begin / on_train_end around it;
//   train_step()             one optimizer step: the global batch, forward_backward_step(),
//                            optimizer_step(), the step's record;
//   forward_backward_step()  every micro-batch's forward + backward (gradients accumulate).
// Logging, checkpoints and the HF export are TrainerHooks (trainer_hooks.cpp), added in that order
// by the constructor; a feature such as validation every N steps or sampling prompts during
// training is one more hook (add_hook), not an edit of the loop.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/device_mesh.h"
#include "model/hf_checkpoint.h"
#include "model/decoder.h"
#include "ops/adamw/adamw.h"
#include "train/checkpoint.h"
#include "train/job_config.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/model_state.h"
#include "train/run_folder.h"
#include "train/train_data.h"

namespace titan {

struct TrainResult {
  int64_t last_step = 0;
  double last_loss = 0;
  bool stopped_by_signal = false;
  std::string last_checkpoint;  // folder, "" when none written
  std::string hf_export;        // folder, "" when none written
};

namespace comm {
class Comm;
}

class Trainer;

// A point where a feature joins the loop. Every rank runs every hook, in the order added (a hook
// that runs collectives must run them on every rank; one that only logs checks trainer.lead()).
class TrainerHook {
 public:
  virtual ~TrainerHook() = default;
  // After setup and resume, before the first step of this run.
  virtual void on_train_begin(Trainer& trainer) {}
  // After step rec.step's optimizer update. trainer.stopping(): the run stops after this step (a
  // stop signal reached some rank); trainer.last_step(): the configured steps end here.
  virtual void on_step_end(Trainer& trainer, const StepRecord& rec) {}
  // After the last step of this run (or the stop), before train() returns `result`.
  virtual void on_train_end(Trainer& trainer, TrainResult& result) {}
};

class Trainer {
 public:
  // Setup, collective: every rank calls it with the same config (checked). Throws on a config the
  // world cannot run, an unusable run folder or a checkpoint this config may not resume.
  Trainer(const JobConfig& cfg, comm::Comm& comm);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  void add_hook(std::unique_ptr<TrainerHook> hook);
  TrainResult train();

  // One optimizer step (step() + 1); returns its record (this rank's tokens and times).
  StepRecord train_step();
  // Forward + backward of this rank's micro-batches, gradients scaled by 1 / `global_count` (the
  // labelled tokens of the whole global batch); returns this rank's summed loss.
  double forward_backward_step(const std::vector<Batch>& micro, int64_t global_count);

  // Collective: writes the checkpoint of step `step` (the model state, data position, config).
  std::string save_checkpoint(int64_t step);
  // Collective: the Hugging Face export of the current weights; returns its folder.
  std::string export_hf();

  // For hooks.
  const JobConfig& cfg() const { return cfg_; }
  TrainData& data() { return *data_; }
  comm::Comm& comm() { return comm_; }
  comm::DeviceMesh& mesh() { return *mesh_; }
  bool lead() const { return lead_; }  // the rank that logs and writes metrics
  DecoderModel& model() { return state_->model(); }
  ModelState& model_state() { return *state_; }
  MetricsLogger& metrics() { return *metrics_; }
  CheckpointManager* checkpoint_manager() { return ckm_.get(); }  // nullptr: checkpoints off
  int64_t step() const { return step_; }              // the last completed step
  int64_t start_step() const { return start_step_; }  // the step this run resumed from (0: none)
  bool last_step() const { return step_ == cfg_.training.steps; }
  bool stopping() const { return stopping_; }

 private:
  // Setup, in order.
  void init_run();
  void build_model();
  void log_model() const;
  void resume();
  void log_memory() const;
  void init_metrics();
  // The step's parts.
  std::vector<Batch> next_global_batch(int64_t* local_count);
  AdamWParams optimizer_params(int64_t step) const;
  double optimizer_step(const AdamWParams& hp, double* comm_seconds);
  void update_expert_bias(double* comm_seconds);
  bool poll_stop();

  const JobConfig cfg_;
  comm::Comm& comm_;
  const int64_t world_, rank_;
  std::unique_ptr<comm::DeviceMesh> mesh_;  // the parallel layout; data and loss follow its groups
  int64_t batch_rank_ = 0;                  // this rank's rows of each global micro-batch
  const bool lead_;
  std::vector<std::unique_ptr<RunLock>> folder_locks_;
  int64_t seq_ = 0, local_batch_ = 0, accum_ = 0, dp_ = 0, global_batch_ = 0;
  std::unique_ptr<ModelState> state_;
  double flops_per_token_ = 0;
  double head_flops_per_row_ = 0;  // the lm_head's share of flops_per_token_ (per row it runs on)
  int64_t step_head_rows_ = 0;     // rows the lm_head ran on in this step's micro-batches
  double pp_compute_s_ = 0, pp_run_s_ = 0;  // pipeline: this step's stage compute and schedule-run seconds
  std::unique_ptr<TrainData> data_;
  std::unique_ptr<LrSchedule> sched_;
  nlohmann::json model_config_json_;  // the model's config.json, travelling with each checkpoint
  std::unique_ptr<CheckpointManager> ckm_;
  std::unique_ptr<MetricsLogger> metrics_;
  std::vector<std::unique_ptr<TrainerHook>> hooks_;
  int64_t start_step_ = 0, step_ = 0;
  bool stopping_ = false;
  TrainResult result_;
};

// The built-in hooks (trainer_hooks.cpp), which the Trainer adds in this order.
std::unique_ptr<TrainerHook> make_metrics_hook();     // logs each step; the run summary at the end
std::unique_ptr<TrainerHook> make_checkpoint_hook();  // [checkpoint] interval, a stop, the last step
std::unique_ptr<TrainerHook> make_hf_export_hook();   // [checkpoint] last_save_in_hf, unless stopped
// [validation] enable: a held-out loss every freq steps (train/validation.cpp); setup is
// collective (the held-out data is loaded here, so a bad path fails before the first step).
std::unique_ptr<TrainerHook> make_validation_hook(Trainer& trainer);

// One process (a LocalComm).
TrainResult run_training(const JobConfig& cfg);
// Data parallel over the ranks of `comm` (every rank calls it with the same config; checked):
// each rank takes its slice of every global micro-batch, the loss is the mean over the global
// batch's tokens, gradients are summed over ranks; parameters, gradients and optimizer state are
// fully sharded (distributed/fsdp.h) or replicated (train/model_state.h); rank 0 alone logs and writes
// metrics, every rank its checkpoint shard.
TrainResult run_training(const JobConfig& cfg, comm::Comm& comm);

}  // namespace titan
