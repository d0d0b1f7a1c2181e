#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "train/checkpoint_pieces.h"
#include "train/crc32c.h"
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

// How errors name a group of files as a whole.
std::string group_label(const std::string& dir, const std::string& kind, int64_t world) {
  if (world == 1) return dir + "/" + kind + ".tensors";
  return dir + "/" + kind + ".rank-*-of-" + std::to_string(world) + ".tensors";
}

// Whole tensors as pieces (each its own full shape, from element 0).
std::vector<TensorPiece> whole_pieces(const std::vector<NamedTensor>& ts, std::vector<std::string>* names) {
  std::vector<TensorPiece> out;
  out.reserve(ts.size());
  for (auto& t : ts) {
    out.push_back({t.name, t.tensor.defined() ? t.tensor.shape() : Shape{}, 0, t.tensor});
    if (names) names->push_back(t.name);
  }
  return out;
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

std::string state_json_checksum(const nlohmann::json& state) {
  nlohmann::json rest = state;
  rest.erase("state_crc32c");
  const std::string canonical = rest.dump();  // keys sorted, no whitespace
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc32c(canonical.data(), canonical.size()));
  return buf;
}

CheckpointManager::CheckpointManager(std::string folder, int64_t keep_latest_k)
    : folder_(std::move(folder)), keep_(keep_latest_k) {
  TITAN_CHECK(keep_ >= 0, "[checkpoint] keep_latest_k must be >= 0 (0 keeps all)");
}

std::string CheckpointManager::step_dir(int64_t step) const { return folder_ + "/step-" + std::to_string(step); }

std::string CheckpointManager::tensor_file_name(const std::string& kind, int rank, int world) {
  if (world == 1) return kind + ".tensors";
  return kind + ".rank-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".tensors";
}

// Only what a save or prune leaves is removed: a leftover step-N.tmp / .old / .deleting folder
// holding anything else (a user's file moved in, a folder) is kept (and cannot be mistaken for a
// checkpoint either: it has no state.json under its step-N name).
static bool holds_only_checkpoint_files(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (!e.is_regular_file(ec) || e.is_symlink(ec)) return false;
    const bool ours = n == "state.json" || n.rfind("state.json.tmp.", 0) == 0 ||
                      ((n.rfind("model.", 0) == 0 || n.rfind("optimizer.", 0) == 0) && n.find(".tensors") != std::string::npos);
    if (!ours) return false;
  }
  return !ec;
}

void CheckpointManager::clear_leftovers() const {
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
      else if (holds_only_checkpoint_files(p)) fs::remove_all(p, ec);
    } else if ((n.ends_with(".tmp") || n.ends_with(".deleting")) && fs::is_directory(fs::symlink_status(p, ec)) &&
               holds_only_checkpoint_files(p)) {
      fs::remove_all(p, ec);
    }
  }
}

std::string CheckpointManager::save(const TrainState& st, const std::vector<NamedTensor>& model,
                                    const std::vector<NamedTensor>& optimizer) {
  return save_sharded(st, ShardedSave{}, whole_pieces(model, nullptr), whole_pieces(optimizer, nullptr));
}

std::string CheckpointManager::save_sharded(const TrainState& st, const ShardedSave& s,
                                            const std::vector<TensorPiece>& model,
                                            const std::vector<TensorPiece>& optimizer) {
  TITAN_CHECK(st.step >= 0, "checkpoint step must be >= 0, got ", st.step);
  TITAN_CHECK(s.world >= 1 && s.rank >= 0 && s.rank < s.world, folder_, ": checkpoint save by rank ", s.rank,
              " of ", s.world, " ranks (rank out of range)");
  TITAN_CHECK(s.world == 1 || s.barrier, folder_, ": a checkpoint save by ", s.world, " ranks needs a barrier");
  auto barrier = [&] {
    if (s.barrier) s.barrier();
  };
  auto stage = [&](const char* name) {
    if (on_save_stage) on_save_stage(name);
  };
  const bool lead = s.rank == 0;
  const std::string final_dir = step_dir(st.step), tmp = final_dir + ".tmp";
  std::error_code ec;
  if (lead) {
    clear_leftovers();
    TITAN_CHECK(!fs::exists(fs::symlink_status(tmp, ec)), tmp,
                ": holds files a checkpoint save does not write (so it was kept); move them away to save step ", st.step);
    fs::create_directories(tmp, ec);
    TITAN_CHECK(!ec, tmp, ": cannot create: ", ec.message());
  }
  barrier();
  write_tensor_pieces(tmp + "/" + tensor_file_name("model", s.rank, s.world), model);
  stage("model");
  write_tensor_pieces(tmp + "/" + tensor_file_name("optimizer", s.rank, s.world), optimizer);
  stage("optimizer");
  barrier();
  if (lead) {
    nlohmann::json files = nlohmann::json::object();
    for (const char* kind : {"model", "optimizer"}) {
      std::vector<std::string> paths;
      for (int r = 0; r < s.world; ++r) {
        std::string name = tensor_file_name(kind, r, s.world);
        paths.push_back(tmp + "/" + name);
        uint64_t bytes = fs::file_size(paths.back(), ec);
        TITAN_CHECK(!ec, paths.back(), ": missing after every rank wrote its files: ", ec.message());
        files[name] = {{"bytes", bytes}};
      }
      // Indexes only: a checkpoint that would not load (a tensor not tiled by the ranks' pieces)
      // is refused here rather than at resume.
      CheckpointPieces(paths, group_label(tmp, kind, s.world));
    }
    nlohmann::json j = {{"format", "titan-checkpoint"},
                        {"version", s.world == 1 ? 1 : 2},
                        {"step", st.step},
                        {"world_size", s.world},
                        {"config_hash", st.config_hash},
                        {"data_state_hex", to_hex(st.data_state)},
                        {"rng_state_hex", to_hex(st.rng_state)},
                        {"extra", st.extra},
                        {"files", files}};
    j["state_crc32c"] = state_json_checksum(j);
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
  }
  barrier();
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
    // Checkpoints written before state checksums have none: their tensor files still carry CRCs,
    // and a CRC is no signature (whoever edits on purpose can recompute it), so they still load.
    if (j.is_object() && j.contains("state_crc32c"))
      TITAN_CHECK(j["state_crc32c"].is_string() && j["state_crc32c"].get<std::string>() == state_json_checksum(j), path,
                  ": checksum mismatch (edited or damaged)");
    TITAN_CHECK(j.at("format") == "titan-checkpoint" && (j.at("version") == 1 || j.at("version") == 2), path,
                ": not a titan checkpoint state (format/version)");
    st.step = j.at("step").get<int64_t>();
    TITAN_CHECK(st.step == step, path, ": records step ", st.step, " but lives in step-", step);
    // Version 1 states written before sharded saves carry no world_size: one process.
    st.world_size = j.value("world_size", int64_t(1));
    TITAN_CHECK(st.world_size >= 1 && st.world_size <= (1 << 20) && (j.at("version") == 1) == (st.world_size == 1),
                path, ": bad world_size ", st.world_size, " for version ", j.at("version").dump());
    st.config_hash = j.at("config_hash").get<std::string>();
    st.data_state = from_hex(j.at("data_state_hex").get<std::string>(), path + " data_state_hex");
    st.rng_state = from_hex(j.at("rng_state_hex").get<std::string>(), path + " rng_state_hex");
    st.extra = j.at("extra");
    const nlohmann::json& files = j.at("files");
    for (const char* kind : {"model", "optimizer"})
      for (int r = 0; r < int(st.world_size); ++r) {
        std::string name = tensor_file_name(kind, r, int(st.world_size));
        TITAN_CHECK(files.contains(name), path, ": does not list ", name, " (written by ", st.world_size, " ranks)");
      }
    for (auto& [name, info] : files.items()) {
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

void CheckpointManager::load_group(const TrainState& st, const std::string& kind,
                                   const std::vector<std::string>& names, std::vector<TensorPiece>& pieces) const {
  const std::string dir = step_dir(st.step);
  std::vector<std::string> paths;
  for (int r = 0; r < int(st.world_size); ++r) paths.push_back(dir + "/" + tensor_file_name(kind, r, int(st.world_size)));
  CheckpointPieces group(paths, group_label(dir, kind, st.world_size));
  group.check_names(names);
  group.fill(pieces);
}

TrainState CheckpointManager::load_pieces(int64_t step, const std::vector<std::string>& model_names,
                                          std::vector<TensorPiece>& model,
                                          const std::vector<std::string>& optimizer_names,
                                          std::vector<TensorPiece>& optimizer) const {
  TrainState st = read_state(step);
  load_group(st, "model", model_names, model);  // one group's files open at a time
  load_group(st, "optimizer", optimizer_names, optimizer);
  return st;
}

TrainState CheckpointManager::load_model_pieces(int64_t step, const std::vector<std::string>& model_names,
                                                std::vector<TensorPiece>& model) const {
  TrainState st = read_state(step);
  load_group(st, "model", model_names, model);
  return st;
}

TrainState CheckpointManager::load(int64_t step, std::vector<NamedTensor>& model,
                                   std::vector<NamedTensor>& optimizer) const {
  std::vector<std::string> model_names, optimizer_names;
  std::vector<TensorPiece> mp = whole_pieces(model, &model_names), op = whole_pieces(optimizer, &optimizer_names);
  return load_pieces(step, model_names, mp, optimizer_names, op);
}

}  // namespace titan
