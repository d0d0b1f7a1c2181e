// Training checkpoints: folder layout, atomic writes, retention and resume.
//
//   <folder>/step-<N>/model.tensors       model parameters (tensor_file.h format)
//   <folder>/step-<N>/optimizer.tensors   optimizer state (names chosen by the trainer)
//   <folder>/step-<N>/state.json          {"format":"titan-checkpoint","version":1,"step":N,
//                                          "config_hash", "data_state_hex", "rng_state_hex",
//                                          "extra", "files":{name:{"bytes"}}}
//
// save() writes everything into step-<N>.tmp, fsyncs each file and the folder, then renames it
// to step-<N> and fsyncs the parent: a crash leaves either the old set of checkpoints or the new
// one, plus at most a stale *.tmp folder, which the scanner ignores and the next save() removes.
// Pruning renames a folder to step-<N>.deleting before removing it, for the same reason.
// "Latest" is found by scanning for step-<N> folders that hold a state.json.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "train/tensor_file.h"

namespace titan {

struct TrainState {
  int64_t step = 0;
  std::string config_hash;     // config_hash(JobConfig) of the run that wrote it
  std::string data_state;      // opaque bytes from the data pipeline (its position)
  std::string rng_state;       // opaque bytes: the trainer's RNG state (seed, counters)
  nlohmann::json extra = nlohmann::json::object();  // anything else the trainer wants back
};

class CheckpointManager {
 public:
  // keep_latest_k: after each save keep only the newest k checkpoints (0 keeps all).
  CheckpointManager(std::string folder, int64_t keep_latest_k);

  // Atomically write step-<state.step>; replaces an existing folder of the same step; prunes.
  // Returns the final folder path.
  std::string save(const TrainState& state, const std::vector<NamedTensor>& model,
                   const std::vector<NamedTensor>& optimizer);

  // Steps of the complete checkpoints, ascending. A missing folder gives an empty list.
  std::vector<int64_t> list_steps() const;
  std::optional<int64_t> latest_step() const;

  // Read state.json of step N (error naming the file when missing or malformed).
  TrainState read_state(int64_t step) const;
  // Load step N into existing tensors: the names in each file must equal the given names exactly
  // (each missing or unexpected one is an error naming the file), dtypes and shapes must match,
  // and every checksum is verified. Returns the train state.
  TrainState load(int64_t step, std::vector<NamedTensor>& model, std::vector<NamedTensor>& optimizer) const;

  std::string step_dir(int64_t step) const;
  const std::string& folder() const { return folder_; }

  // Fault injection for tests: called after each stage of save() ("model", "optimizer",
  // "state", "fsync"); throwing from it simulates a crash at that point.
  std::function<void(const std::string& stage)> on_save_stage;

 private:
  void prune() const;
  std::string folder_;
  int64_t keep_;
};

// Lower-case hex of bytes and back (back: error naming `what` on bad input).
std::string to_hex(const std::string& bytes);
std::string from_hex(const std::string& hex, const std::string& what);

}  // namespace titan
