// Sharded checkpoints: W ranks (threads with a real barrier) each save their FSDP-style pieces;
// the checkpoint is loaded back by 1, 2, 3, 4 ... ranks under other layouts (resharding), by the
// whole-tensor API and by load_checkpoint_model; damaged checkpoints fail with one line naming
// the file or folder.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "model/hf_checkpoint.h"
#include "model/config.h"
#include "train/checkpoint_model.h"
#include "unit/train/checkpoint_test_util.h"

using namespace titan;
using namespace titan::test;
namespace fs = std::filesystem;

namespace {

// A barrier that a failing rank breaks, so the others stop waiting (as MPI_Abort would end them).
class TestBarrier {
 public:
  explicit TestBarrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    if (broken_) throw std::runtime_error("barrier broken");
    const uint64_t gen = gen_;
    if (++waiting_ == n_) {
      waiting_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return gen_ != gen || broken_; });
    if (gen_ == gen) throw std::runtime_error("barrier broken");
  }
  void abort() {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, waiting_ = 0;
  uint64_t gen_ = 0;
  bool broken_ = false;
};

using Pieces = std::vector<TensorPiece>;

// Runs save_sharded for every rank on its own thread with its own CheckpointManager; returns each
// rank's error ("" when it succeeded).
std::vector<std::string> save_ranks(const std::string& dir, const TrainState& st, const std::vector<Pieces>& model,
                                    const std::vector<Pieces>& opt,
                                    std::function<void(int rank, const std::string& stage)> on_stage = {}) {
  const int world = int(model.size());
  TestBarrier bar(world);
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        CheckpointManager cm(dir, 0);
        if (on_stage) cm.on_save_stage = [&, r](const std::string& s) { on_stage(r, s); };
        EXPECT_EQ(cm.save_sharded(st, ShardedSave{r, world, [&] { bar.wait(); }}, model[size_t(r)], opt[size_t(r)]),
                  dir + "/step-" + std::to_string(st.step));
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
        bar.abort();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

struct Range {
  size_t tensor;
  int64_t offset, count;
};

// FSDP-like layout: the tensors (one unit, or each its own unit) flattened and concatenated,
// padded to a multiple of `world`, cut into equal contiguous chunks; rank r gets the non-empty
// intersections of its chunk with each tensor. So tensors split across rank boundaries, ranks
// own nothing of some tensors, and the last chunk runs into padding.
std::vector<std::vector<Range>> fsdp_layout(const std::vector<NamedTensor>& ts, int world, bool unit_per_tensor) {
  std::vector<std::vector<Range>> out(static_cast<size_t>(world));
  std::vector<std::vector<size_t>> units;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (unit_per_tensor || units.empty()) units.emplace_back();
    units.back().push_back(i);
  }
  int64_t total_covered = 0, total = 0;
  for (auto& unit : units) {
    int64_t sum = 0;
    for (size_t i : unit) sum += ts[i].tensor.numel();
    const int64_t chunk = (sum + world - 1) / world;
    int64_t base = 0;
    for (size_t i : unit) {
      const int64_t n = ts[i].tensor.numel();
      for (int r = 0; r < world; ++r) {
        const int64_t b = std::max(base, r * chunk), e = std::min(base + n, (r + 1) * chunk);
        if (b < e) out[size_t(r)].push_back({i, b - base, e - b});
        if (b < e) total_covered += e - b;
      }
      base += n;
    }
    total += sum;
  }
  EXPECT_EQ(total_covered, total);  // the helper itself: every element owned exactly once
  return out;
}

Tensor flat(const Tensor& t, int64_t off, int64_t n) { return t.view({t.numel()}).slice0(off, off + n); }

// The pieces a rank saves: views of the tensors' ranges.
Pieces views_of(const std::vector<NamedTensor>& ts, const std::vector<Range>& rs) {
  Pieces out;
  for (auto& r : rs) out.push_back({ts[r.tensor].name, ts[r.tensor].tensor.shape(), r.offset,
                                    flat(ts[r.tensor].tensor, r.offset, r.count)});
  return out;
}

// The pieces a rank loads into: zero-filled buffers for the same ranges.
Pieces zeros_for(const std::vector<NamedTensor>& ts, const std::vector<Range>& rs) {
  Pieces out;
  for (auto& r : rs)
    out.push_back({ts[r.tensor].name, ts[r.tensor].tensor.shape(), r.offset,
                   Tensor::zeros({r.count}, ts[r.tensor].tensor.dtype())});
  return out;
}

void expect_pieces_equal(const std::vector<NamedTensor>& ts, const Pieces& ps, const std::string& what) {
  for (auto& p : ps) {
    auto it = std::find_if(ts.begin(), ts.end(), [&](const NamedTensor& t) { return t.name == p.name; });
    ASSERT_NE(it, ts.end()) << p.name;
    Tensor want = flat(it->tensor, p.offset, p.data.numel());
    EXPECT_EQ(std::memcmp(want.raw(), p.data.raw(), want.nbytes()), 0)
        << what << ": " << p.name << " elements [" << p.offset << ", " << p.offset + p.data.numel() << ")";
  }
}

std::vector<std::string> names_of(const std::vector<NamedTensor>& ts) {
  std::vector<std::string> out;
  for (auto& t : ts) out.push_back(t.name);
  return out;
}

std::vector<Pieces> rank_views(const std::vector<NamedTensor>& ts, int world, bool per_tensor) {
  std::vector<Pieces> out;
  for (auto& rs : fsdp_layout(ts, world, per_tensor)) out.push_back(views_of(ts, rs));
  return out;
}

// Saves m and o by `world` ranks (FSDP layout); expects every rank to succeed.
void save_fsdp(const std::string& dir, int64_t step, const std::vector<NamedTensor>& m,
               const std::vector<NamedTensor>& o, int world, bool per_tensor) {
  auto errors = save_ranks(dir, state_at(step), rank_views(m, world, per_tensor), rank_views(o, world, per_tensor));
  for (int r = 0; r < world; ++r) ASSERT_EQ(errors[size_t(r)], "") << "rank " << r;
}

// Every rank of a `world`-rank job loads its pieces of m and o and finds the originals.
void load_as_ranks(const CheckpointManager& cm, int64_t step, const std::vector<NamedTensor>& m,
                   const std::vector<NamedTensor>& o, int world, bool per_tensor, int64_t written_by) {
  auto lm = fsdp_layout(m, world, per_tensor), lo = fsdp_layout(o, world, per_tensor);
  for (int r = 0; r < world; ++r) {
    Pieces mp = zeros_for(m, lm[size_t(r)]), op = zeros_for(o, lo[size_t(r)]);
    TrainState st = cm.load_pieces(step, names_of(m), mp, names_of(o), op);
    std::string what = "load as rank " + std::to_string(r) + " of " + std::to_string(world);
    expect_pieces_equal(m, mp, what);
    expect_pieces_equal(o, op, what);
    TrainState want = state_at(step);
    EXPECT_EQ(st.step, step);
    EXPECT_EQ(st.world_size, written_by);
    EXPECT_EQ(st.data_state, want.data_state);
    EXPECT_EQ(st.rng_state, want.rng_state);
    EXPECT_EQ(st.extra, want.extra);
  }
}

std::vector<std::string> entry_names(const std::string& path) {
  std::vector<std::string> out;
  TensorFileReader r(path);
  for (auto& e : r.entries()) out.push_back(e.name + "@" + std::to_string(e.elem_offset));
  return out;
}

}  // namespace

TEST(ShardedCheckpoint, ThreeRanksSaveLoadsWithAnyRankCount) {
  std::string dir = temp_dir("sh3");
  auto m = model_tensors(1), o = optim_tensors(1);
  save_fsdp(dir, 7, m, o, 3, false);
  std::string sd = dir + "/step-7";
  EXPECT_FALSE(fs::exists(dir + "/step-7.tmp"));
  EXPECT_FALSE(fs::exists(sd + "/model.tensors"));
  for (int r = 0; r < 3; ++r)
    for (const char* kind : {"model", "optimizer"})
      EXPECT_TRUE(fs::exists(sd + "/" + kind + ".rank-" + std::to_string(r) + "-of-3.tensors")) << kind << r;
  // One unit of 31 elements over 3 ranks: chunks of 11, the last with 2 elements of padding.
  // Rank 0 owns 11 of the 15 embedding elements and nothing else; rank 1 the rest of the
  // embedding, the norm and 2 of the 7 bf16 elements; rank 2 the other 5 and the i64 tensor.
  EXPECT_EQ(entry_names(sd + "/model.rank-0-of-3.tensors"), (std::vector<std::string>{"model.embed_tokens.weight@0"}));
  EXPECT_EQ(entry_names(sd + "/model.rank-1-of-3.tensors"),
            (std::vector<std::string>{"model.embed_tokens.weight@11", "model.norm.weight@0", "model.bf16_thing@0"}));
  EXPECT_EQ(entry_names(sd + "/model.rank-2-of-3.tensors"),
            (std::vector<std::string>{"model.bf16_thing@2", "model.ids@0"}));
  nlohmann::json state = nlohmann::json::parse(read_file(sd + "/state.json"));
  EXPECT_EQ(state["world_size"], 3);
  EXPECT_EQ(state["version"], 2);
  EXPECT_EQ(state["files"].size(), 6u);
  EXPECT_EQ(state["files"]["optimizer.rank-2-of-3.tensors"]["bytes"],
            fs::file_size(sd + "/optimizer.rank-2-of-3.tensors"));

  CheckpointManager cm(dir, 0);
  EXPECT_EQ(cm.latest_step().value_or(-1), 7);
  for (int world : {1, 2, 3, 4, 5})
    for (bool per_tensor : {false, true}) load_as_ranks(cm, 7, m, o, world, per_tensor, 3);
  // One process, whole tensors.
  auto m2 = zeros_like(m), o2 = zeros_like(o);
  EXPECT_EQ(cm.load(7, m2, o2).world_size, 3);
  expect_same(m, m2);
  expect_same(o, o2);
  fs::remove_all(dir);
}

TEST(ShardedCheckpoint, OneProcessCheckpointLoadsAsPieces) {
  std::string dir = temp_dir("sh1");
  auto m = model_tensors(2), o = optim_tensors(2);
  CheckpointManager cm(dir, 0);
  cm.save(state_at(3), m, o);
  std::string sd = dir + "/step-3";
  EXPECT_TRUE(fs::exists(sd + "/model.tensors") && fs::exists(sd + "/optimizer.tensors"));
  // Unchanged formats for one process: version 1 state and version 1 tensor files, whole tensors.
  nlohmann::json state = nlohmann::json::parse(read_file(sd + "/state.json"));
  EXPECT_EQ(state["version"], 1);
  EXPECT_EQ(state["world_size"], 1);
  EXPECT_NE(read_file(sd + "/model.tensors").find("\"version\":1"), std::string::npos);
  TensorFileReader whole(sd + "/model.tensors");
  for (auto& e : whole.entries()) EXPECT_FALSE(e.piece) << e.name;
  for (int world : {1, 2, 3, 4})
    for (bool per_tensor : {false, true}) load_as_ranks(cm, 3, m, o, world, per_tensor, 1);
  // A state.json from before sharded saves (no world_size) still loads.
  state.erase("world_size");
  write_state_json(sd + "/state.json", state);
  load_as_ranks(cm, 3, m, o, 2, false, 1);
  fs::remove_all(dir);
}

TEST(ShardedCheckpoint, RanksWithNothingAndEmptyPieces) {
  std::string dir = temp_dir("shempty");
  auto m = model_tensors(3), o = optim_tensors(3);
  // 4 ranks, a unit per tensor: the 4-element i64 tensor gives each rank one element, the
  // 5-element norm leaves rank 3 only padding. Then 5 ranks where rank 4 has no pieces at all and
  // rank 0 passes explicit empty pieces.
  save_fsdp(dir, 1, m, o, 4, true);
  CheckpointManager cm(dir, 0);
  for (int world : {1, 3, 4}) load_as_ranks(cm, 1, m, o, world, true, 4);

  auto mv = rank_views(m, 4, false), ov = rank_views(o, 4, false);
  mv.push_back({});
  ov.push_back({});
  mv[0].push_back({m[3].name, m[3].tensor.shape(), 4, Tensor::empty({0}, DType::I64)});
  mv[0].push_back({m[1].name, m[1].tensor.shape(), 2, Tensor::empty({0}, DType::F32)});
  auto errors = save_ranks(dir, state_at(2), mv, ov);
  for (auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_TRUE(TensorFileReader(dir + "/step-2/model.rank-4-of-5.tensors").entries().empty());
  for (int world : {1, 2, 7}) load_as_ranks(cm, 2, m, o, world, false, 5);
  fs::remove_all(dir);
}

TEST(ShardedCheckpoint, ExportAndVerifyAssembleFullTensors) {
  std::string dir = temp_dir("shmodel");
  ModelConfig mc = flavor_config("debug-tiny");
  DecoderModel model(mc, "cpu");
  model.init_weights(InitScheme::Torchtitan, 5);
  std::vector<NamedTensor> m;
  for (auto& p : model.params().all()) m.push_back({p.name, p.value});
  std::vector<NamedTensor> o = {{"step_count", Tensor::zeros({1}, DType::F32)}};
  TrainState st = state_at(4);
  st.extra["model_config"] = nlohmann::json::parse(hf_config_json(mc, DType::F32));
  auto errors = save_ranks(dir, st, rank_views(m, 3, true), rank_views(o, 3, true));
  for (auto& e : errors) ASSERT_EQ(e, "");
  int64_t step = -1;
  auto loaded = load_checkpoint_model(dir, &step);
  EXPECT_EQ(step, 4);
  std::vector<NamedTensor> back;
  for (auto& p : loaded->params().all()) back.push_back({p.name, p.value});
  expect_same(m, back);
  // The CLI on the sharded folder: verify round-trips it through an HF export.
  std::string cmd = std::string(TITAN_BIN) + " verify checkpoint " + dir + "/step-4 --quiet > " + dir + "/verify.log 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << read_file(dir + "/verify.log");
  EXPECT_NE(read_file(dir + "/verify.log").find("export round trip exact"), std::string::npos);
  // And export, read back through the HF loader.
  cmd = std::string(TITAN_BIN) + " export --from " + dir + " --output " + dir + "/hf --dtype f32 > " + dir +
        "/export.log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file(dir + "/export.log");
  HfCheckpoint hf = HfCheckpoint::open(dir + "/hf");
  for (auto& t : m) {
    if (t.name == "lm_head.weight" && mc.tie_word_embeddings) continue;
    Tensor x = hf.get(t.name, DType::F32);
    ASSERT_EQ(x.nbytes(), t.tensor.nbytes()) << t.name;
    EXPECT_EQ(std::memcmp(x.raw(), t.tensor.raw(), x.nbytes()), 0) << t.name;
  }
  fs::remove_all(dir);
}

TEST(ShardedCheckpoint, CrashOfAnyRankAtAnyStageKeepsTheOldSet) {
  std::string dir = temp_dir("shcrash");
  auto m = model_tensors(1), o = optim_tensors(1);
  save_fsdp(dir, 10, m, o, 3, false);
  struct Crash {
    int rank;
    const char* stage;
  };
  for (Crash c : {Crash{2, "model"}, Crash{1, "optimizer"}, Crash{0, "model"}, Crash{0, "state"}, Crash{0, "fsync"}}) {
    std::string where = std::string(c.stage) + " on rank " + std::to_string(c.rank);
    auto errors = save_ranks(dir, state_at(20), rank_views(model_tensors(2), 3, false), rank_views(o, 3, false),
                             [&](int r, const std::string& s) {
                               if (r == c.rank && s == c.stage) throw std::runtime_error("simulated crash");
                             });
    EXPECT_EQ(errors[size_t(c.rank)], "simulated crash") << where;
    EXPECT_TRUE(fs::exists(dir + "/step-20.tmp")) << where;
    CheckpointManager resume(dir, 0);
    EXPECT_EQ(resume.list_steps(), (std::vector<int64_t>{10})) << where;
    load_as_ranks(resume, 10, m, o, 2, false, 3);
  }
  // The next save (by another rank count) clears the .tmp; re-saving step 10 with 2 ranks
  // replaces its 3-rank files entirely.
  save_fsdp(dir, 20, m, o, 2, false);
  save_fsdp(dir, 10, m, o, 2, true);
  EXPECT_FALSE(fs::exists(dir + "/step-20.tmp"));
  EXPECT_FALSE(fs::exists(dir + "/step-10/model.rank-0-of-3.tensors"));
  CheckpointManager cm(dir, 0);
  EXPECT_EQ(cm.list_steps(), (std::vector<int64_t>{10, 20}));
  load_as_ranks(cm, 10, m, o, 3, false, 2);
  load_as_ranks(cm, 20, m, o, 1, false, 2);
  fs::remove_all(dir);
}

namespace {

// One line that holds every part.
void expect_error(const std::string& e, const std::vector<std::string>& parts, const std::string& what) {
  EXPECT_FALSE(e.empty()) << what << ": no error";
  EXPECT_EQ(e.find('\n'), std::string::npos) << what << ": " << e;
  for (auto& p : parts) EXPECT_NE(e.find(p), std::string::npos) << what << ": '" << p << "' not in: " << e;
}

// Rewrite one file of a step folder and record its new size, so that only the content is wrong.
void replace_file(const std::string& sd, const std::string& name, const Pieces& pieces) {
  write_tensor_pieces(sd + "/" + name, pieces);
  nlohmann::json j = nlohmann::json::parse(read_file(sd + "/state.json"));
  j["files"][name]["bytes"] = fs::file_size(sd + "/" + name);
  write_state_json(sd + "/state.json", j);
}

}  // namespace

TEST(ShardedCheckpoint, DamagedCheckpointsFailWithOneLineNamingFileOrFolder) {
  std::string good = temp_dir("shgood");
  auto m = model_tensors(1), o = optim_tensors(1);
  save_fsdp(good, 1, m, o, 3, false);
  auto views = rank_views(m, 3, false);  // rank 1: embed [11, 15), norm [0, 5), bf16 [0, 2)
  const std::string embed = "model.embed_tokens.weight";
  // A fresh copy of the good checkpoint per case.
  int n = 0;
  auto fresh = [&](std::string* sd) {
    std::string dir = temp_dir("shbad" + std::to_string(n++));
    fs::create_directories(dir);
    fs::copy(good + "/step-1", dir + "/step-1", fs::copy_options::recursive);
    *sd = dir + "/step-1";
    return CheckpointManager(dir, 0);
  };
  // Every way of loading: 2 ranks' pieces and the whole-tensor API.
  auto load_errors = [&](const CheckpointManager& cm, std::vector<std::string> mnames = {}) {
    if (mnames.empty()) mnames = names_of(m);
    std::vector<std::string> out;
    auto lm = fsdp_layout(m, 2, false), lo = fsdp_layout(o, 2, false);
    for (int r = 0; r < 2; ++r) {
      Pieces mp = zeros_for(m, lm[size_t(r)]), op = zeros_for(o, lo[size_t(r)]);
      out.push_back(error_of([&] { cm.load_pieces(1, mnames, mp, names_of(o), op); }));
    }
    auto m2 = zeros_like(m), o2 = zeros_like(o);
    if (mnames == names_of(m)) out.push_back(error_of([&] { cm.load(1, m2, o2); }));
    return out;
  };
  std::string sd;

  {  // A gap: rank 1 lost its embedding piece.
    auto cm = fresh(&sd);
    replace_file(sd, "model.rank-1-of-3.tensors", Pieces(views[1].begin() + 1, views[1].end()));
    for (auto& e : load_errors(cm))
      expect_error(e, {sd + "/model.rank-*-of-3.tensors: tensor '" + embed + "' f32[3, 5]: elements [11, 15) are in no file",
                       "checkpoint incomplete"}, "gap");
  }
  {  // Overlapping pieces from two ranks.
    auto cm = fresh(&sd);
    Pieces p = views[1];
    p[0] = {embed, {3, 5}, 10, flat(m[0].tensor, 10, 5)};
    replace_file(sd, "model.rank-1-of-3.tensors", p);
    for (auto& e : load_errors(cm))
      expect_error(e, {sd + "/model.rank-1-of-3.tensors: tensor '" + embed + "' elements [10, 15) overlap elements [0, 11)",
                       sd + "/model.rank-0-of-3.tensors"}, "overlap");
  }
  {  // A piece that claims another full shape.
    auto cm = fresh(&sd);
    Pieces p = views[1];
    p[0].full_shape = {5, 3};
    replace_file(sd, "model.rank-1-of-3.tensors", p);
    for (auto& e : load_errors(cm))
      expect_error(e, {sd + "/model.rank-1-of-3.tensors: tensor '" + embed + "' is f32[5, 3] but " + sd +
                       "/model.rank-0-of-3.tensors stores it as f32[3, 5]"}, "full shape");
  }
  {  // A corrupted byte in a tensor's data.
    auto cm = fresh(&sd);
    std::string f = sd + "/optimizer.rank-2-of-3.tensors";
    std::string b = read_file(f);
    b[64 + 2] ^= 0x01;
    write_file_atomic(f, b);
    // Entries a rank does not read are not verified: rank 0 of 2 needs nothing from that entry.
    auto errors = load_errors(cm);
    EXPECT_EQ(errors[0], "");
    for (size_t i = 1; i < errors.size(); ++i)
      expect_error(errors[i], {f + ": tensor 'exp_avg_sq.model.embed_tokens.weight' checksum mismatch"}, "crc");
  }
  {  // A truncated file: the recorded size says so; with the size "fixed", the footer does.
    auto cm = fresh(&sd);
    std::string f = sd + "/model.rank-2-of-3.tensors";
    fs::resize_file(f, fs::file_size(f) - 5);
    for (auto& e : load_errors(cm)) expect_error(e, {f + ": size", "truncated or corrupt"}, "truncated");
    nlohmann::json j = nlohmann::json::parse(read_file(sd + "/state.json"));
    j["files"]["model.rank-2-of-3.tensors"]["bytes"] = fs::file_size(f);
    write_state_json(sd + "/state.json", j);
    for (auto& e : load_errors(cm)) expect_error(e, {f + ": bad end marker"}, "truncated, size fixed");
  }
  {  // A rank's file is gone, or state.json does not list it.
    auto cm = fresh(&sd);
    fs::remove(sd + "/optimizer.rank-0-of-3.tensors");
    for (auto& e : load_errors(cm))
      expect_error(e, {sd + "/optimizer.rank-0-of-3.tensors: missing (checkpoint incomplete)"}, "missing file");
    auto cm2 = fresh(&sd);
    nlohmann::json j = nlohmann::json::parse(read_file(sd + "/state.json"));
    j["files"].erase("model.rank-2-of-3.tensors");
    write_state_json(sd + "/state.json", j);
    for (auto& e : load_errors(cm2))
      expect_error(e, {sd + "/state.json: does not list model.rank-2-of-3.tensors"}, "unlisted file");
  }
  {  // Name sets: an unexpected tensor names the file holding it; a missing one the folder.
    auto cm = fresh(&sd);
    std::vector<std::string> fewer = names_of(m);
    fewer.pop_back();
    for (auto& e : load_errors(cm, fewer))
      expect_error(e, {sd + "/model.rank-2-of-3.tensors: unexpected tensor 'model.ids'"}, "unexpected name");
    std::vector<std::string> more = names_of(m);
    more.push_back("model.extra");
    for (auto& e : load_errors(cm, more))
      expect_error(e, {sd + "/model.rank-*-of-3.tensors: missing tensor 'model.extra'"}, "missing name");
  }
  {  // Requests the checkpoint cannot serve: another full shape, dtype, or a range beyond the tensor.
    auto cm = fresh(&sd);
    std::vector<std::string> mn = names_of(m), on = names_of(o);
    Pieces none;
    Pieces p = {{embed, {5, 3}, 0, Tensor::zeros({15}, DType::F32)}};
    expect_error(error_of([&] { cm.load_pieces(1, mn, p, on, none); }),
                 {sd + "/model.rank-0-of-3.tensors: tensor '" + embed + "' is f32[3, 5] but the destination is f32[5, 3]"},
                 "request full shape");
    p = {{embed, {3, 5}, 4, Tensor::zeros({3}, DType::BF16)}};
    expect_error(error_of([&] { cm.load_pieces(1, mn, p, on, none); }),
                 {"is f32[3, 5] but the destination is bf16[3, 5] elements [4, 7)"}, "request dtype");
    p = {{embed, {3, 5}, 12, Tensor::zeros({4}, DType::F32)}};
    expect_error(error_of([&] { cm.load_pieces(1, mn, p, on, none); }),
                 {sd + "/model.rank-*-of-3.tensors: requested elements [12, 16) of tensor '" + embed +
                  "' lie outside its full shape [3, 5]"},
                 "request range");
  }
  for (int i = 0; i < n; ++i) fs::remove_all(temp_dir("shbad" + std::to_string(i)));
  fs::remove_all(good);
}

// Rank 0 checks the tiling before it commits: a save whose pieces leave a gap, or overlap, fails
// on rank 0 with the tensor and elements named, and no step folder appears.
TEST(ShardedCheckpoint, SaveRefusesPiecesThatDoNotTile) {
  std::string dir = temp_dir("shsavegap");
  auto m = model_tensors(1), o = optim_tensors(1);
  auto mv = rank_views(m, 3, false), ov = rank_views(o, 3, false);
  mv[1].erase(mv[1].begin());  // embed [11, 15) written by nobody
  auto errors = save_ranks(dir, state_at(5), mv, ov);
  expect_error(errors[0],
               {dir + "/step-5.tmp/model.rank-*-of-3.tensors: tensor 'model.embed_tokens.weight' f32[3, 5]: elements "
                      "[11, 15) are in no file"},
               "save gap");
  EXPECT_EQ(errors[1], "barrier broken");
  EXPECT_TRUE(CheckpointManager(dir, 0).list_steps().empty());

  mv = rank_views(m, 3, false);
  ov[2].push_back({o[0].name, o[0].tensor.shape(), 9, flat(o[0].tensor, 9, 1)});  // also held by rank 0
  errors = save_ranks(dir, state_at(5), mv, ov);
  expect_error(errors[0],
               {dir + "/step-5.tmp/optimizer.rank-2-of-3.tensors: tensor 'exp_avg.model.embed_tokens.weight' elements "
                      "[9, 10) overlap elements [0, 10) stored in " + dir + "/step-5.tmp/optimizer.rank-0-of-3.tensors"},
               "save overlap");
  EXPECT_TRUE(CheckpointManager(dir, 0).list_steps().empty());

  // A rank's own bad piece fails on that rank, naming its file.
  ov = rank_views(o, 3, false);
  mv[2].push_back({"model.ids", {2, 2}, 3, Tensor::zeros({2}, DType::I64)});
  errors = save_ranks(dir, state_at(5), mv, ov);
  expect_error(errors[2], {dir + "/step-5.tmp/model.rank-2-of-3.tensors: piece of tensor 'model.ids' (elements [3, 5))"},
               "bad piece");
  ShardedSave bad{3, 3, [] {}};
  expect_error(error_of([&] { CheckpointManager(dir, 0).save_sharded(state_at(5), bad, {}, {}); }),
               {"rank 3 of 3 ranks"}, "bad rank");
  expect_error(error_of([&] { CheckpointManager(dir, 0).save_sharded(state_at(5), ShardedSave{0, 2, {}}, {}, {}); }),
               {"needs a barrier"}, "no barrier");
  fs::remove_all(dir);
}
