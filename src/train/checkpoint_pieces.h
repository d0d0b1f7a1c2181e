// One group of a checkpoint's tensor files (the model's or the optimizer's: one file for a
// one-process save, one per rank for a sharded save) seen as one set of named tensors, each tiled
// by the pieces stored across the files. Used by CheckpointManager to verify a save and to load.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "train/tensor_file.h"

namespace titan {

class CheckpointPieces {
 public:
  // Opens each file once and reads its index (no tensor data), then checks every name across the
  // files: one dtype and full shape, pieces disjoint and covering every element exactly once.
  // `label` names the group in errors that concern no single file (a missing tensor, a gap),
  // e.g. "<step dir>/model.tensors" or "<step dir>/model.rank-*-of-4.tensors".
  CheckpointPieces(const std::vector<std::string>& paths, std::string label);

  // The stored names must equal `names` exactly: an unexpected one is an error naming the file
  // that holds it, a missing one an error naming the group.
  void check_names(const std::vector<std::string>& names) const;

  // Fill each piece (same dtype and full shape as stored, range within it; on the CPU or on
  // cuda:0) from the stored entries that overlap it. Each overlapping entry is read once (in file
  // order) and its CRC verified; entries no piece overlaps are not read. An entry that feeds a
  // piece on the GPU is read in chunks into one bounded pinned buffer (core/pinned_staging.h),
  // each chunk copied on to the device; on a CRC mismatch what reached the pieces is garbage.
  void fill(std::vector<TensorPiece>& pieces) const;

  std::vector<std::string> names() const;

 private:
  struct Ref {
    size_t file;                   // index into files_
    const TensorFileEntry* entry;  // owned by files_[file]
  };
  std::vector<std::unique_ptr<TensorFileReader>> files_;
  std::map<std::string, std::vector<Ref>> by_name_;  // each sorted by first element
  std::string label_;
};

}  // namespace titan
