// Training checkpoints: folder layout, atomic writes, retention, resume and resharding.
//
// A one-process save (world size 1):
//   <folder>/step-<N>/model.tensors       model parameters (tensor_file.h format)
//   <folder>/step-<N>/optimizer.tensors   optimizer state (names chosen by the trainer)
//   <folder>/step-<N>/state.json          {"format":"titan-checkpoint","version":1,"step":N,
//                                          "world_size":1, "config_hash", "data_state_hex",
//                                          "rng_state_hex", "extra", "files":{name:{"bytes"}},
//                                          "state_crc32c"}
// A save by W > 1 ranks (each rank holds pieces: contiguous element ranges of the row-major
// flattening of some tensors, as FSDP / ZeRO-3 shards them):
//   <folder>/step-<N>/model.rank-<r>-of-<W>.tensors       rank r's pieces, r = 0..W-1
//   <folder>/step-<N>/optimizer.rank-<r>-of-<W>.tensors
//   <folder>/step-<N>/state.json          as above with "version":2, "world_size":W and every
//                                          file listed with its size
// state_crc32c: CRC-32C (8 hex digits) of the canonical serialization (keys sorted, no whitespace)
// of every other field; a state.json whose content no longer matches it is refused as "edited or
// damaged" (re-indenting is no change). A state.json without it (written before the field) loads.
// Across the files of a group (model or optimizer) every tensor is tiled exactly: one dtype and
// full shape, pieces disjoint, every element stored once. Any checkpoint loads with any rank
// count: load_pieces fills whatever element ranges the caller asks for from whichever files hold
// them (resharding), and a whole-tensor load is the special case of one piece per tensor.
//
// Atomicity: rank 0 clears leftovers and creates step-<N>.tmp; every rank writes and fsyncs its
// files into it; rank 0 checks the tiling, writes state.json, fsyncs the folder, renames it to
// step-<N> and fsyncs the parent (barriers between the stages). A crash anywhere leaves either the
// old set of checkpoints or the new one, plus at most a stale *.tmp folder, which the scanner
// ignores and the next save removes. Pruning renames a folder to step-<N>.deleting before
// removing it, for the same reason. "Latest" is found by scanning for step-<N> folders that hold
// a state.json. All ranks must see the same checkpoint folder (a shared file system).
//
// Devices: the tensors saved and the tensors loaded into may be on the CPU or on cuda:0, mixed
// freely. A GPU tensor is written and read through one bounded pinned buffer per file group
// (core/pinned_staging.h), never a whole host copy, and the files do not record the device: a
// GPU model's checkpoint is byte for byte the one the same values on the CPU give, so a run saved
// on the GPU resumes on the CPU and the other way round.
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
  int64_t world_size = 1;  // read back: how many ranks wrote the checkpoint (save ignores it)
};

// How the ranks of one job cooperate on a save.
struct ShardedSave {
  int rank = 0, world = 1;
  std::function<void()> barrier;  // collective barrier across all ranks (may be empty for world 1)
};

class CheckpointManager {
 public:
  // keep_latest_k: after each save keep only the newest k checkpoints (0 keeps all).
  CheckpointManager(std::string folder, int64_t keep_latest_k);

  // Atomically write step-<state.step>; replaces an existing folder of the same step; prunes.
  // Returns the final folder path. One process, whole tensors: save_sharded with world 1.
  std::string save(const TrainState& state, const std::vector<NamedTensor>& model,
                   const std::vector<NamedTensor>& optimizer);

  // Every rank of the job calls this with its own pieces (TrainState: only rank 0's is recorded).
  // Stages: rank 0 clears leftovers and creates step-N.tmp; barrier; each rank writes (and
  // fsyncs) its model and optimizer files (names from tensor_file_name); barrier; rank 0 checks
  // that the files tile every tensor, writes state.json, fsyncs, renames step-N.tmp to step-N and
  // prunes; barrier. Returns the final folder. An error on any rank is thrown on that rank only
  // (the others wait in the next barrier): the caller must end the whole job on an error.
  std::string save_sharded(const TrainState& state, const ShardedSave& s, const std::vector<TensorPiece>& model,
                           const std::vector<TensorPiece>& optimizer);

  // "model.tensors" for world 1, else "model.rank-<r>-of-<world>.tensors" (kind: model/optimizer).
  static std::string tensor_file_name(const std::string& kind, int rank, int world);

  // Steps of the complete checkpoints, ascending. A missing folder gives an empty list.
  std::vector<int64_t> list_steps() const;
  std::optional<int64_t> latest_step() const;

  // Read state.json of step N (error naming the file when missing or malformed).
  TrainState read_state(int64_t step) const;
  // Load step N into existing whole tensors (load_pieces with one whole piece per tensor).
  TrainState load(int64_t step, std::vector<NamedTensor>& model, std::vector<NamedTensor>& optimizer) const;

  // Fill each requested piece from whatever files step N has, whatever rank count wrote it.
  // model_names / optimizer_names: the full set of names the caller's model / optimizer has (a
  // rank may request pieces of only some of them); the checkpoint's names must equal it exactly
  // (a missing or unexpected name is an error naming the file or folder). Before reading, every
  // stored tensor must be tiled exactly by its pieces (else an error naming the tensor, the
  // missing or overlapping elements and the folder), so all ranks accept or refuse a checkpoint
  // alike. A requested piece needs the stored dtype and full shape and a range within it. Every
  // stored entry that overlaps a request is read once and CRC-verified; the others are not read.
  TrainState load_pieces(int64_t step, const std::vector<std::string>& model_names, std::vector<TensorPiece>& model,
                         const std::vector<std::string>& optimizer_names, std::vector<TensorPiece>& optimizer) const;
  // The model group alone (export, verification): the optimizer files are not opened.
  TrainState load_model_pieces(int64_t step, const std::vector<std::string>& model_names,
                               std::vector<TensorPiece>& model) const;

  std::string step_dir(int64_t step) const;
  const std::string& folder() const { return folder_; }

  // Fault injection for tests: called after each stage of a save ("model", "optimizer" on every
  // rank; "state", "fsync" on rank 0); throwing from it simulates a crash at that point.
  std::function<void(const std::string& stage)> on_save_stage;

 private:
  void clear_leftovers() const;
  void prune() const;
  void load_group(const TrainState& st, const std::string& kind, const std::vector<std::string>& names,
                  std::vector<TensorPiece>& pieces) const;
  std::string folder_;
  int64_t keep_;
};

// The state_crc32c a state.json object must carry (computed over every field but itself).
std::string state_json_checksum(const nlohmann::json& state);

// Lower-case hex of bytes and back (back: error naming `what` on bad input).
std::string to_hex(const std::string& bytes);
std::string from_hex(const std::string& hex, const std::string& what);

}  // namespace titan
