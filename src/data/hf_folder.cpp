#include "data/hf_folder.h"

#include <glob.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "data/doc_reader.h"

namespace titan::data {

namespace fs = std::filesystem;

namespace {

bool digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// <split>-NNNNN-of-MMMMM[-<hash>].<ext>, the extension a dataset format.
bool parse_shard(const fs::path& p, HfShard* s) {
  const std::string name = p.filename().string();
  const size_t of = name.rfind("-of-");
  if (of == std::string::npos || of < 2) return false;
  const size_t dash = name.rfind('-', of - 1);
  if (dash == std::string::npos || dash == 0) return false;
  const std::string index = name.substr(dash + 1, of - dash - 1);
  size_t end = of + 4;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  const std::string count = name.substr(of + 4, end - of - 4);
  if (!digits(index) || !digits(count) || index.size() != count.size() || index.size() > 9) return false;
  if (end >= name.size() || (name[end] != '.' && name[end] != '-')) return false;
  if (!is_dataset_file(name)) return false;
  s->path = p.string();
  s->split = name.substr(0, dash);
  s->index = std::stoi(index);
  s->count = std::stoi(count);
  return true;
}

}  // namespace

std::vector<HfShard> hf_shards(const std::string& folder) {
  std::vector<HfShard> out;
  std::error_code ec;
  for (const fs::path& dir : {fs::path(folder) / "data", fs::path(folder)}) {
    if (!fs::is_directory(dir, ec)) continue;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      HfShard s;
      if (e.is_regular_file(ec) && parse_shard(e.path(), &s)) out.push_back(std::move(s));
    }
    if (!out.empty()) break;
  }
  std::sort(out.begin(), out.end(), [](const HfShard& a, const HfShard& b) {
    return a.split != b.split ? a.split < b.split : a.index != b.index ? a.index < b.index : a.path < b.path;
  });
  return out;
}

std::vector<std::string> hf_split_files(const std::string& folder, const std::string& split) {
  const std::vector<HfShard> all = hf_shards(folder);
  std::set<std::string> splits;
  std::vector<const HfShard*> mine;
  for (const HfShard& s : all) {
    splits.insert(s.split);
    if (s.split == split) mine.push_back(&s);
  }
  if (mine.empty()) {
    std::string names;
    for (auto& s : splits) names += (names.empty() ? "" : ", ") + s;
    fail(folder, ": a Hugging Face dataset folder without a '", split, "' split (its splits: ",
         names.empty() ? "none" : names, "); name one as ", folder, "/<split>");
  }
  const int count = mine[0]->count;
  std::vector<std::string> files;
  for (size_t i = 0; i < mine.size(); ++i) {
    const HfShard& s = *mine[i];
    TITAN_CHECK(s.count == count, folder, ": split '", split, "' mixes shard counts ", count, " and ", s.count, " (",
                fs::path(s.path).filename().string(), ")");
    TITAN_CHECK(s.index >= int(i), folder, ": split '", split, "' has two files for shard ", s.index, " (",
                fs::path(mine[i - 1]->path).filename().string(), ", ", fs::path(s.path).filename().string(), ")");
    TITAN_CHECK(s.index == int(i), folder, ": split '", split, "' lacks shard ", i, " of ", count,
                " (an incomplete download?)");
    files.push_back(s.path);
  }
  TITAN_CHECK(int(files.size()) == count, folder, ": split '", split, "' has ", files.size(), " of its ", count,
              " shards (an incomplete download?)");
  return files;
}

std::string datasets_root() {
  const char* env = std::getenv("TITAN_DATASETS_DIR");
  return env && *env ? env : "";
}

bool is_glob(const std::string& path) { return path.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t g{};
  const int r = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> out;
  for (size_t i = 0; r == 0 && i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  TITAN_CHECK(r == 0 || r == GLOB_NOMATCH, pattern, ": cannot expand the glob (a folder that cannot be read?)");
  TITAN_CHECK(!out.empty(), "dataset glob '", pattern, "' matches no files");
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace titan::data
