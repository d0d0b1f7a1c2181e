// Hugging Face dataset folders and globs, as dataset paths (data/dataset.h's
// resolve_dataset_files):
//   - A folder in the hub's layout: its shard files, named <split>-NNNNN-of-MMMMM[-<hash>].<ext>,
//     lie in F/data/ (or in F itself). F means its "train" split; F/<split> (a path that does not
//     exist as such) means that split. The shards are read in shard order, and a missing shard
//     or two shard counts in one split are errors, as an incomplete download would be silent
//     otherwise.
//   - Folders and name/split paths are also looked up under $TITAN_DATASETS_DIR when they are not
//     found as given ("HuggingFaceFW/fineweb-edu/train").
//   - A path with *, ? or [...] is a glob (glob(3)); its matches, in name order, are the files.
#pragma once
#include <string>
#include <vector>

namespace titan::data {

struct HfShard {
  std::string path, split;
  int index = 0, count = 0;
};

// The shard files of a folder in the hub's layout, every split, sorted by split and index; empty
// when the folder holds none.
std::vector<HfShard> hf_shards(const std::string& folder);
// The files of one split in shard order; errors name the folder and the splits it has.
std::vector<std::string> hf_split_files(const std::string& folder, const std::string& split);
// $TITAN_DATASETS_DIR, or "" when unset.
std::string datasets_root();

bool is_glob(const std::string& path);
// The matches of a glob in name order; errors when nothing matches.
std::vector<std::string> expand_glob(const std::string& pattern);

}  // namespace titan::data
