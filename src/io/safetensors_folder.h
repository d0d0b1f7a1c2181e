// Folders of safetensors weights as transformers writes them: model.safetensors, or shards listed
// in model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor: shard file}}).
// Names mean nothing here; what the tensors are (a model's parameters, fused layouts, tied
// weights) is the state-dict adapter's business (model/hf_checkpoint.h).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace titan {

class SafetensorsFolder {
 public:
  static constexpr const char* kSingleFile = "model.safetensors";
  static constexpr const char* kIndexFile = "model.safetensors.index.json";

  // Opens `dir` (trailing slashes ignored) and validates it: the single file when present (as
  // transformers prefers it), else the index: every weight_map entry must name an existing
  // regular file inside the folder (no absolute paths, no "..", no symlink leading out), and
  // each tensor must sit in exactly the shard the index names. Errors name the file at fault.
  static SafetensorsFolder open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool contains(const std::string& name) const { return where_.count(name) > 0; }
  // The file holding `name`; an error naming the folder when there is none.
  const SafetensorsFile& file_of(const std::string& name) const;
  // Every stored tensor name (sorted) -> its file's index in files().
  const std::map<std::string, size_t>& tensors() const { return where_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  std::string dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> where_;
};

// Writes such a folder one tensor at a time, holding none of them. The layout (names, stored
// dtypes, shapes, in the order they will be added) fixes the whole plan in the constructor:
// shards are filled in layout order, a new one starting when the next tensor would pass
// max_shard_bytes (as transformers does); one shard is model.safetensors, several are
// model-0000k-of-0000N.safetensors plus the index (metadata.total_size = tensor bytes).
//
// Each file is written atomically (SafetensorsStreamWriter): a shard when its last tensor arrives,
// the index by finish(), which then removes the weight files of an earlier write in `dir` that
// would contradict this one (the other layout, extra shards). A sharded write removes an earlier
// index before its first shard replaces anything, so a write that fails part-way never leaves an
// index over a mix of old and new shards. Destroyed without finish(), the shard being written is
// discarded. `origin` starts error messages ("export to <dir>").
class SafetensorsFolderWriter {
 public:
  SafetensorsFolderWriter(const std::string& dir, std::vector<SafetensorsSpec> layout, uint64_t max_shard_bytes,
                          const std::string& origin);
  ~SafetensorsFolderWriter();
  SafetensorsFolderWriter(const SafetensorsFolderWriter&) = delete;
  SafetensorsFolderWriter& operator=(const SafetensorsFolderWriter&) = delete;

  // The next tensor of the layout (created `dir` on the first call); converted and written now.
  void add(const std::string& name, const Tensor& t);
  // All tensors added: writes the index (sharded; `metadata` joins total_size) and removes stale
  // weight files.
  void finish(const nlohmann::json& metadata = nlohmann::json::object());

  const std::string& dir() const { return dir_; }
  size_t added() const { return next_; }
  size_t shard_count() const { return shards_.size(); }
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  struct Shard {
    std::string file;
    size_t first = 0, last = 0;  // layout indices [first, last]
  };
  void open_shard(size_t k);

  std::string dir_, origin_;
  std::vector<SafetensorsSpec> layout_;
  std::vector<Shard> shards_;
  std::vector<size_t> shard_of_;  // layout index -> shard
  uint64_t total_bytes_ = 0;
  size_t next_ = 0;
  std::unique_ptr<SafetensorsStreamWriter> open_;  // the shard being filled
};

}  // namespace titan
