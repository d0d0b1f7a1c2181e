#include "io/safetensors_folder.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "util/json_util.h"
#include "util/strings.h"

namespace titan {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

std::string without_trailing_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

// A weight_map value must name an existing file inside the folder, also after resolving symlinks.
std::string shard_path(const std::string& dir, const std::string& real_dir, const std::string& file,
                       const std::string& index_path) {
  TITAN_CHECK(!file.empty() && file.find('\0') == std::string::npos, index_path, ": weight_map has an invalid file name ",
              quote(file));
  TITAN_CHECK(file[0] != '/', index_path, ": weight_map file ", quote(file), " is an absolute path; shards must be inside the folder");
  for (const auto& part : split(file, '/'))
    TITAN_CHECK(part != "..", index_path, ": weight_map file ", quote(file), " escapes the folder (\"..\")");
  std::string p = dir + "/" + file;
  std::string real = real_path(p);
  TITAN_CHECK(!real.empty(), index_path, ": weight_map names shard ", quote(file), ", which does not exist (",
              std::strerror(errno), ")");
  TITAN_CHECK(real.compare(0, real_dir.size() + 1, real_dir + "/") == 0, index_path, ": weight_map file ", quote(file),
              " resolves to ", quote(real, 200), ", outside the folder");
  TITAN_CHECK(is_regular_file(real), index_path, ": weight_map file ", quote(file), " is not a regular file");
  return p;
}

}  // namespace

SafetensorsFolder SafetensorsFolder::open(const std::string& dir_in) {
  SafetensorsFolder sf;
  const std::string dir = sf.dir_ = without_trailing_slashes(dir_in);
  struct stat st {};
  TITAN_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), dir, ": not a checkpoint folder (not a directory)");
  const std::string single = dir + "/" + kSingleFile, index = dir + "/" + kIndexFile;
  if (is_regular_file(single)) {  // transformers prefers the single file when both exist
    sf.files_.push_back(SafetensorsFile::open(single));
    for (const auto& e : sf.files_[0].entries()) sf.where_[e.name] = 0;
    return sf;
  }
  TITAN_CHECK(is_regular_file(index), dir, ": no ", kSingleFile, " or ", kIndexFile, " in the checkpoint folder");
  json j = parse_json_strict(read_regular_file(index), index);
  TITAN_CHECK(j.is_object(), index, ": must be a JSON object, got ", json_kind(j));
  TITAN_CHECK(j.contains("weight_map"), index, ": missing \"weight_map\"");
  const json& wm = j["weight_map"];
  TITAN_CHECK(wm.is_object(), index, ": weight_map must be an object, got ", json_kind(wm));
  if (j.contains("metadata"))
    TITAN_CHECK(j["metadata"].is_object() || j["metadata"].is_null(), index, ": metadata must be an object");
  const std::string real_dir = real_path(dir);
  std::map<std::string, std::vector<std::string>> by_file;  // shard file -> tensor names
  for (auto it = wm.begin(); it != wm.end(); ++it) {
    TITAN_CHECK(it->is_string(), index, ": weight_map value for ", quote(it.key()), " must be a file name, got ", json_kind(*it));
    by_file[it->get<std::string>()].push_back(it.key());
  }
  // Resolve and validate every shard first, so that a missing or escaping file is reported as
  // such rather than as a tensor the other shards lack.
  for (const auto& [file, names] : by_file) sf.files_.push_back(SafetensorsFile::open(shard_path(dir, real_dir, file, index)));
  size_t fi = 0;
  for (const auto& [file, names] : by_file) {
    const SafetensorsFile& f = sf.files_[fi];
    for (const auto& n : names) {
      TITAN_CHECK(f.contains(n), index, ": weight_map puts tensor ", quote(n), " in ", quote(file), ", which has no such tensor");
      sf.where_[n] = fi;
    }
    for (const auto& e : f.entries()) {
      auto w = wm.find(e.name);
      TITAN_CHECK(w != wm.end() && *w == file, f.origin(), ": tensor ", quote(e.name),
                  w == wm.end() ? " is not listed in " : " is listed under another shard in ", kIndexFile);
    }
    ++fi;
  }
  return sf;
}

const SafetensorsFile& SafetensorsFolder::file_of(const std::string& name) const {
  auto it = where_.find(name);
  TITAN_CHECK(it != where_.end(), dir_, ": no tensor ", quote(name), " in the checkpoint");
  return files_[it->second];
}

SafetensorsFolderWriter::SafetensorsFolderWriter(const std::string& dir, std::vector<SafetensorsSpec> layout,
                                                 uint64_t max_shard_bytes, const std::string& origin)
    : dir_(without_trailing_slashes(dir)), origin_(origin), layout_(std::move(layout)) {
  TITAN_CHECK(max_shard_bytes > 0, origin_, ": max shard size must be positive");
  TITAN_CHECK(!layout_.empty(), origin_, ": no tensors to write");
  // Shards in layout order: a new one starts when the next tensor would pass the limit.
  uint64_t shard_bytes = 0;
  for (size_t i = 0; i < layout_.size(); ++i) {
    uint64_t bytes = dtype_size(layout_[i].dtype);
    for (int64_t d : layout_[i].shape) bytes *= uint64_t(d);
    if (shards_.empty() || (i > shards_.back().first && shard_bytes + bytes > max_shard_bytes)) {
      shards_.push_back({"", i, i});
      shard_bytes = 0;
    }
    shards_.back().last = i;
    shard_of_.push_back(shards_.size() - 1);
    shard_bytes += bytes;
    total_bytes_ += bytes;
  }
  const size_t n = shards_.size();
  for (size_t k = 0; k < n; ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, n);
    shards_[k].file = n == 1 ? SafetensorsFolder::kSingleFile : name;
  }
}

SafetensorsFolderWriter::~SafetensorsFolderWriter() = default;

void SafetensorsFolderWriter::open_shard(size_t k) {
  if (k == 0) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    TITAN_CHECK(!ec, dir_, ": cannot create the folder: ", ec.message());
    // An earlier index would otherwise describe a mix of its shards and ours until finish().
    if (shards_.size() > 1) fs::remove(dir_ + "/" + SafetensorsFolder::kIndexFile, ec);
  }
  std::vector<SafetensorsSpec> specs(layout_.begin() + ptrdiff_t(shards_[k].first),
                                     layout_.begin() + ptrdiff_t(shards_[k].last) + 1);
  open_ = std::make_unique<SafetensorsStreamWriter>(dir_ + "/" + shards_[k].file, specs);
}

void SafetensorsFolderWriter::add(const std::string& name, const Tensor& t) {
  TITAN_CHECK(next_ < layout_.size() && name == layout_[next_].name, origin_, ": tensor ", quote(name),
              " is not the next one of the folder's layout");
  const size_t k = shard_of_[next_];
  if (!open_) open_shard(k);
  open_->write(name, t);
  if (next_ == shards_[k].last) {
    open_->commit();
    open_.reset();
  }
  ++next_;
}

void SafetensorsFolderWriter::finish(const json& metadata) {
  TITAN_CHECK(next_ == layout_.size(), origin_, ": ", layout_.size() - next_, " tensors were not written");
  std::set<std::string> written;
  for (const auto& sh : shards_) written.insert(sh.file);
  if (shards_.size() > 1) {
    json wm = json::object();
    for (size_t i = 0; i < layout_.size(); ++i) wm[layout_[i].name] = shards_[shard_of_[i]].file;
    json meta = metadata.is_object() ? metadata : json::object();
    meta["total_size"] = total_bytes_;
    json index = {{"metadata", meta}, {"weight_map", wm}};
    write_file_atomic(dir_ + "/" + SafetensorsFolder::kIndexFile, index.dump(2) + "\n");
    written.insert(SafetensorsFolder::kIndexFile);
  }
  // Remove what an earlier write left that would contradict this one.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    unsigned a = 0, b = 0;
    char tail[32] = {0};
    bool is_shard = std::sscanf(name.c_str(), "model-%5u-of-%5u.%31s", &a, &b, tail) == 3 && std::string(tail) == "safetensors";
    if ((is_shard || name == SafetensorsFolder::kSingleFile || name == SafetensorsFolder::kIndexFile) && !written.count(name))
      fs::remove(entry.path(), ec);
  }
}

}  // namespace titan
