// Whether a training checkpoint may continue under this job's config.
//
// A checkpoint records in its state (TrainState::extra) "trajectory_config" (trajectory_config()
// of the run that wrote it: the keys that decide the numerical trajectory), "training_steps" and
// the model's config.json ("model_config"). A resume compares them key by key with this job's and
// refuses with one line naming every key that differs, with the recorded and the new value (a key
// only one side has, from another titan version, is not compared).
//
// [training] steps may differ: a run is extended by raising it. The lr schedule (warm-up, decay)
// is then recomputed for the new total, as torchtitan's LambdaLR is when a run resumes with a new
// config; a note for the log says which lr the next step gets under the new and the old schedule.
//
// Checkpoints written before the record carry the effective job config as TOML ("job_config"),
// which gives the record; without that either, only config_hash() is left, which must match.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/checkpoint.h"
#include "train/job_config.h"

namespace titan {

// Records what check_resume_config compares into st.extra (model_config is the trainer's).
void record_resume_config(TrainState& st, const JobConfig& cfg, int64_t world_size);

// Throws (naming `step_dir`) when the checkpoint state `st` may not continue under `cfg` with
// `world_size` ranks and the model config.json `model_config`; returns notes for the log.
std::vector<std::string> check_resume_config(const TrainState& st, const std::string& step_dir, const JobConfig& cfg,
                                             int64_t world_size, const nlohmann::json& model_config);

}  // namespace titan
