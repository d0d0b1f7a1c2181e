#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "util/strings.h"

namespace fs = std::filesystem;

namespace titan {
namespace {

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  TITAN_CHECK(fd >= 0, dir, ": cannot open folder for fsync: ", std::strerror(errno));
  int rc = ::fsync(fd);
  ::close(fd);
  TITAN_CHECK(rc == 0, dir, ": fsync failed: ", std::strerror(errno));
}

// "step-123" -> 123; anything else (step-12.tmp, step-x, step-012) -> nullopt.
std::optional<int64_t> parse_step_name(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5) return std::nullopt;
  const char* b = name.data() + 5;
  const char* e = name.data() + name.size();
  if (e - b > 1 && *b == '0') return std::nullopt;
  int64_t v = 0;
  auto r = std::from_chars(b, e, v);
  if (r.ec != std::errc() || r.ptr != e || v < 0) return std::nullopt;
  return v;
}

void load_file_into(const std::string& path, std::vector<NamedTensor>& dst) {
  TensorFileReader rd(path);
  std::set<std::string> want;
  for (auto& t : dst) want.insert(t.name);
  for (auto& e : rd.entries())
    TITAN_CHECK(want.count(e.name), path, ": unexpected tensor '", e.name, "' (not in the model being loaded)");
  for (auto& t : dst) {
    TITAN_CHECK(rd.find(t.name) != nullptr, path, ": missing tensor '", t.name, "'");
    rd.read_into(t.name, t.tensor);
  }
}

}  // namespace

std::string to_hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string o;
  o.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    o += d[c >> 4];
    o += d[c & 15];
  }
  return o;
}

std::string from_hex(const std::string& hex, const std::string& what) {
  TITAN_CHECK(hex.size() % 2 == 0, what, ": hex string of odd length");
  auto nib = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    fail(what, ": invalid hex digit '", c, "'");
  };
  std::string o(hex.size() / 2, '\0');
  for (size_t i = 0; i < o.size(); ++i) o[i] = char(nib(hex[2 * i]) * 16 + nib(hex[2 * i + 1]));
  return o;
}

CheckpointManager::CheckpointManager(std::string folder, int64_t keep_latest_k)
    : folder_(std::move(folder)), keep_(keep_latest_k) {
  TITAN_CHECK(keep_ >= 0, "[checkpoint] keep_latest_k must be >= 0 (0 keeps all)");
}

std::string CheckpointManager::step_dir(int64_t step) const { return folder_ + "/step-" + std::to_string(step); }

std::string CheckpointManager::save(const TrainState& st, const std::vector<NamedTensor>& model,
                                    const std::vector<NamedTensor>& optimizer) {
  TITAN_CHECK(st.step >= 0, "checkpoint step must be >= 0, got ", st.step);
  std::error_code ec;
  fs::create_directories(folder_, ec);
  TITAN_CHECK(!ec, folder_, ": cannot create checkpoint folder: ", ec.message());
  // Leftovers of an interrupted save or prune are never valid checkpoints.
  // A step-N.old whose step-N is missing was moved aside by a re-save that crashed before its
  // rename: it is the only complete copy, so it goes back.
  std::vector<fs::path> entries;
  for (auto& e : fs::directory_iterator(folder_)) entries.push_back(e.path());
  for (auto& p : entries) {
    std::string n = p.filename().string();
    if (n.rfind("step-", 0) != 0) continue;
    if (n.ends_with(".old")) {
      fs::path base = p.parent_path() / n.substr(0, n.size() - 4);
      if (!fs::exists(base)) fs::rename(p, base, ec);
      else fs::remove_all(p, ec);
    } else if (n.ends_with(".tmp") || n.ends_with(".deleting")) {
      fs::remove_all(p, ec);
    }
  }
  auto stage = [&](const char* s) {
    if (on_save_stage) on_save_stage(s);
  };

  std::string final_dir = step_dir(st.step), tmp = final_dir + ".tmp";
  fs::create_directories(tmp, ec);
  TITAN_CHECK(!ec, tmp, ": cannot create: ", ec.message());
  write_tensor_file(tmp + "/model.tensors", model);
  stage("model");
  write_tensor_file(tmp + "/optimizer.tensors", optimizer);
  stage("optimizer");

  nlohmann::json j = {{"format", "titan-checkpoint"},
                      {"version", 1},
                      {"step", st.step},
                      {"config_hash", st.config_hash},
                      {"data_state_hex", to_hex(st.data_state)},
                      {"rng_state_hex", to_hex(st.rng_state)},
                      {"extra", st.extra},
                      {"files",
                       {{"model.tensors", {{"bytes", fs::file_size(tmp + "/model.tensors")}}},
                        {"optimizer.tensors", {{"bytes", fs::file_size(tmp + "/optimizer.tensors")}}}}}};
  write_file_atomic(tmp + "/state.json", j.dump(2) + "\n");
  stage("state");
  fsync_dir(tmp);
  stage("fsync");

  if (fs::exists(final_dir)) {  // re-saving a step: move the old one aside, never delete first
    fs::rename(final_dir, final_dir + ".old", ec);
    TITAN_CHECK(!ec, final_dir, ": cannot move the previous checkpoint aside: ", ec.message());
  }
  fs::rename(tmp, final_dir, ec);
  TITAN_CHECK(!ec, tmp, ": cannot rename to ", final_dir, ": ", ec.message());
  fsync_dir(folder_);
  fs::remove_all(final_dir + ".old", ec);
  prune();
  return final_dir;
}

std::vector<int64_t> CheckpointManager::list_steps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(folder_, ec)) return steps;
  for (auto& e : fs::directory_iterator(folder_)) {
    if (!e.is_directory()) continue;
    auto s = parse_step_name(e.path().filename().string());
    if (s && fs::exists(e.path() / "state.json")) steps.push_back(*s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<int64_t> CheckpointManager::latest_step() const {
  auto s = list_steps();
  if (s.empty()) return std::nullopt;
  return s.back();
}

void CheckpointManager::prune() const {
  if (keep_ == 0) return;
  auto steps = list_steps();
  for (size_t i = 0; i + size_t(keep_) < steps.size(); ++i) {
    std::string d = step_dir(steps[i]);
    std::error_code ec;
    fs::rename(d, d + ".deleting", ec);
    TITAN_CHECK(!ec, d, ": cannot remove old checkpoint: ", ec.message());
    fs::remove_all(d + ".deleting", ec);
  }
  fsync_dir(folder_);
}

TrainState CheckpointManager::read_state(int64_t step) const {
  std::string path = step_dir(step) + "/state.json";
  TITAN_CHECK(fs::exists(path), path, ": no such checkpoint (", step_dir(step), " is missing or incomplete)");
  TrainState st;
  try {
    nlohmann::json j = nlohmann::json::parse(read_file(path));
    TITAN_CHECK(j.at("format") == "titan-checkpoint" && j.at("version") == 1, path,
                ": not a titan checkpoint state (format/version)");
    st.step = j.at("step").get<int64_t>();
    TITAN_CHECK(st.step == step, path, ": records step ", st.step, " but lives in step-", step);
    st.config_hash = j.at("config_hash").get<std::string>();
    st.data_state = from_hex(j.at("data_state_hex").get<std::string>(), path + " data_state_hex");
    st.rng_state = from_hex(j.at("rng_state_hex").get<std::string>(), path + " rng_state_hex");
    st.extra = j.at("extra");
    for (auto& [name, info] : j.at("files").items()) {
      std::string f = step_dir(step) + "/" + name;
      std::error_code ec;
      uint64_t size = fs::file_size(f, ec);
      TITAN_CHECK(!ec, f, ": missing (checkpoint incomplete)");
      TITAN_CHECK(size == info.at("bytes").get<uint64_t>(), f, ": size ", size, " differs from the recorded ",
                  info.at("bytes").get<uint64_t>(), " bytes (truncated or corrupt)");
    }
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": malformed checkpoint state: ", e.what());
  }
  return st;
}

TrainState CheckpointManager::load(int64_t step, std::vector<NamedTensor>& model,
                                   std::vector<NamedTensor>& optimizer) const {
  TrainState st = read_state(step);
  load_file_into(step_dir(step) + "/model.tensors", model);
  load_file_into(step_dir(step) + "/optimizer.tensors", optimizer);
  return st;
}

}  // namespace titan
