#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "unit/train/checkpoint_test_util.h"

using namespace titan;
namespace fs = std::filesystem;

using namespace titan::test;

TEST(Checkpoint, SaveLoadRoundTripsTensorsAndState) {
  std::string dir = temp_dir("rt");
  CheckpointManager cm(dir, 3);
  auto m = model_tensors(1), o = optim_tensors(1);
  std::string path = cm.save(state_at(10), m, o);
  EXPECT_EQ(path, dir + "/step-10");
  EXPECT_FALSE(fs::exists(dir + "/step-10.tmp"));
  EXPECT_TRUE(fs::exists(path + "/model.tensors") && fs::exists(path + "/optimizer.tensors"));
  ASSERT_EQ(cm.latest_step().value_or(-1), 10);

  auto m2 = zeros_like(m), o2 = zeros_like(o);
  TrainState st = cm.load(10, m2, o2);
  expect_same(m, m2);
  expect_same(o, o2);
  TrainState want = state_at(10);
  EXPECT_EQ(st.step, 10);
  EXPECT_EQ(st.config_hash, want.config_hash);
  EXPECT_EQ(st.data_state, want.data_state);
  EXPECT_EQ(st.rng_state, want.rng_state);
  EXPECT_EQ(st.extra, want.extra);

  // Re-saving the same step replaces it.
  auto m3 = model_tensors(5);
  cm.save(state_at(10), m3, o);
  auto m4 = zeros_like(m);
  cm.load(10, m4, o2);
  expect_same(m3, m4);
  EXPECT_EQ(cm.list_steps(), (std::vector<int64_t>{10}));
  fs::remove_all(dir);
}

TEST(Checkpoint, KeepLatestKAndLatestByScanning) {
  std::string dir = temp_dir("keep");
  CheckpointManager cm(dir, 2);
  EXPECT_FALSE(cm.latest_step().has_value());  // no folder yet
  auto m = model_tensors(1), o = optim_tensors(1);
  for (int64_t s : {10, 20, 30, 5}) cm.save(state_at(s), m, o);
  // Newest by step, not by write order: 5 is the oldest and is pruned right away.
  EXPECT_EQ(cm.list_steps(), (std::vector<int64_t>{20, 30}));
  EXPECT_EQ(cm.latest_step().value(), 30);
  // Foreign names are ignored.
  fs::create_directories(dir + "/step-007");
  fs::create_directories(dir + "/step-x");
  fs::create_directories(dir + "/notes");
  fs::create_directories(dir + "/step-99");  // no state.json: incomplete
  EXPECT_EQ(cm.list_steps(), (std::vector<int64_t>{20, 30}));

  std::string all = temp_dir("keepall");
  CheckpointManager keep_all(all, 0);
  for (int64_t s : {1, 2, 3}) keep_all.save(state_at(s), m, o);
  EXPECT_EQ(keep_all.list_steps(), (std::vector<int64_t>{1, 2, 3}));
  fs::remove_all(dir);
  fs::remove_all(all);
}

TEST(Checkpoint, CrashMidWriteLeavesAnIgnoredTmp) {
  std::string dir = temp_dir("crash");
  auto m = model_tensors(1), o = optim_tensors(1);
  {
    CheckpointManager cm(dir, 5);
    cm.save(state_at(20), m, o);
  }
  for (const char* crash_at : {"model", "optimizer", "state", "fsync"}) {
    CheckpointManager cm(dir, 5);
    cm.on_save_stage = [&](const std::string& s) {
      if (s == crash_at) throw std::runtime_error("simulated crash");
    };
    EXPECT_THROW(cm.save(state_at(40), model_tensors(2), o), std::runtime_error);
    EXPECT_TRUE(fs::exists(dir + "/step-40.tmp")) << crash_at;
    // Resume sees only the complete checkpoint and loads it.
    CheckpointManager resume(dir, 5);
    EXPECT_EQ(resume.latest_step().value(), 20) << crash_at;
    auto m2 = zeros_like(m), o2 = zeros_like(o);
    EXPECT_EQ(resume.load(20, m2, o2).step, 20);
    expect_same(m, m2);
    EXPECT_NE(error_of([&] { resume.read_state(40); }).find("no such checkpoint"), std::string::npos);
  }
  // The next save clears the stale .tmp and succeeds.
  CheckpointManager cm(dir, 5);
  cm.save(state_at(40), m, o);
  EXPECT_FALSE(fs::exists(dir + "/step-40.tmp"));
  EXPECT_EQ(cm.list_steps(), (std::vector<int64_t>{20, 40}));
  fs::remove_all(dir);
}

// Only what a save or prune leaves is removed: a leftover-looking folder holding anything else
// (a user's notes, a folder) stays.
TEST(Checkpoint, LeftoversHoldingOtherFilesAreKept) {
  std::string dir = temp_dir("leftovers");
  auto m = model_tensors(1), o = optim_tensors(1);
  fs::create_directories(dir + "/step-7.tmp");
  write_file_atomic(dir + "/step-7.tmp/notes.txt", "mine");
  fs::create_directories(dir + "/step-8.deleting/sub");
  fs::create_directories(dir + "/step-9.tmp");
  write_file_atomic(dir + "/step-9.tmp/model.tensors", "partial");
  write_file_atomic(dir + "/step-9.tmp/state.json.tmp.123", "partial");
  CheckpointManager cm(dir, 5);
  cm.save(state_at(20), m, o);
  EXPECT_TRUE(fs::exists(dir + "/step-7.tmp/notes.txt"));
  EXPECT_TRUE(fs::exists(dir + "/step-8.deleting/sub"));
  EXPECT_FALSE(fs::exists(dir + "/step-9.tmp"));
  EXPECT_EQ(cm.list_steps(), (std::vector<int64_t>{20}));
  fs::remove_all(dir);
}

TEST(Checkpoint, ResaveCrashRestoresTheMovedAsideCopy) {
  std::string dir = temp_dir("old");
  auto m = model_tensors(1), o = optim_tensors(1);
  CheckpointManager cm(dir, 0);
  cm.save(state_at(50), m, o);
  // A re-save of step 50 that crashed between "move aside" and "rename": only step-50.old is left.
  fs::rename(dir + "/step-50", dir + "/step-50.old");
  EXPECT_TRUE(cm.list_steps().empty());
  cm.save(state_at(60), m, o);
  EXPECT_EQ(cm.list_steps(), (std::vector<int64_t>{50, 60}));
  auto m2 = zeros_like(m), o2 = zeros_like(o);
  cm.load(50, m2, o2);
  expect_same(m, m2);
  fs::remove_all(dir);
}

TEST(Checkpoint, CorruptionIsDetectedAndNamed) {
  std::string dir = temp_dir("corrupt");
  auto m = model_tensors(1), o = optim_tensors(1);
  CheckpointManager cm(dir, 0);
  cm.save(state_at(1), m, o);
  cm.save(state_at(2), m, o);
  cm.save(state_at(3), m, o);
  cm.save(state_at(4), m, o);
  auto m2 = zeros_like(m), o2 = zeros_like(o);

  // A flipped bit inside the first tensor's data.
  std::string mf = dir + "/step-1/model.tensors";
  {
    std::string b = read_file(mf);
    b[64 + 3] ^= 0x01;
    write_file_atomic(mf, b);
  }
  std::string e = error_of([&] { cm.load(1, m2, o2); });
  EXPECT_NE(e.find(mf), std::string::npos) << e;
  EXPECT_NE(e.find("'model.embed_tokens.weight' checksum mismatch"), std::string::npos) << e;

  // A truncated optimizer file: the recorded size no longer matches.
  std::string of = dir + "/step-2/optimizer.tensors";
  fs::resize_file(of, fs::file_size(of) - 5);
  e = error_of([&] { cm.load(2, m2, o2); });
  EXPECT_NE(e.find(of), std::string::npos) << e;
  EXPECT_NE(e.find("truncated or corrupt"), std::string::npos) << e;

  // A damaged index (near the end of the file).
  std::string mf3 = dir + "/step-3/model.tensors";
  flip_byte(mf3, 40);
  e = error_of([&] { cm.load(3, m2, o2); });
  EXPECT_NE(e.find(mf3), std::string::npos) << e;

  // Malformed state.json.
  std::string sj = dir + "/step-4/state.json";
  write_file_atomic(sj, "{\"format\": \"titan-checkpoint\", ");
  e = error_of([&] { cm.load(4, m2, o2); });
  EXPECT_NE(e.find(sj), std::string::npos) << e;
  EXPECT_NE(e.find("malformed"), std::string::npos) << e;

  // Not a tensor file at all.
  write_file_atomic(dir + "/junk.tensors", std::string(100, 'x'));
  e = error_of([&] { TensorFileReader r(dir + "/junk.tensors"); });
  EXPECT_NE(e.find("bad magic"), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(Checkpoint, LoadRequiresExactNamesShapesAndDtypes) {
  std::string dir = temp_dir("names");
  auto m = model_tensors(1), o = optim_tensors(1);
  CheckpointManager cm(dir, 0);
  cm.save(state_at(1), m, o);
  auto o2 = zeros_like(o);

  auto more = zeros_like(m);
  more.push_back({"model.extra", Tensor::zeros({2}, DType::F32)});
  EXPECT_NE(error_of([&] { cm.load(1, more, o2); }).find("missing tensor 'model.extra'"), std::string::npos);

  auto fewer = zeros_like(m);
  fewer.pop_back();
  EXPECT_NE(error_of([&] { cm.load(1, fewer, o2); }).find("unexpected tensor 'model.ids'"), std::string::npos);

  auto reshaped = zeros_like(m);
  reshaped[0].tensor = Tensor::zeros({5, 3}, DType::F32);
  std::string e = error_of([&] { cm.load(1, reshaped, o2); });
  EXPECT_NE(e.find("'model.embed_tokens.weight' is f32[3, 5] but the destination is f32[5, 3]"), std::string::npos)
      << e;

  auto retyped = zeros_like(m);
  retyped[1].tensor = Tensor::zeros({5}, DType::BF16);
  EXPECT_NE(error_of([&] { cm.load(1, retyped, o2); }).find("model.norm.weight"), std::string::npos);

  EXPECT_NE(error_of([&] { write_tensor_file(dir + "/d.tensors", {{"a", m[0].tensor}, {"a", m[1].tensor}}); })
                .find("duplicate tensor name 'a'"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(Checkpoint, TensorFileLayoutIsAligned) {
  std::string dir = temp_dir("layout");
  fs::create_directories(dir);
  auto m = model_tensors(3);
  write_tensor_file(dir + "/x.tensors", m);
  TensorFileReader r(dir + "/x.tensors");
  ASSERT_EQ(r.entries().size(), m.size());
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(r.entries()[i].offset % 64, 0u);
    EXPECT_EQ(r.entries()[i].nbytes, m[i].tensor.nbytes());
    Tensor t = r.read(m[i].name);
    EXPECT_EQ(std::memcmp(t.raw(), m[i].tensor.raw(), t.nbytes()), 0);
  }
  EXPECT_EQ(from_hex(to_hex(std::string("\x00\xff\x10z", 4)), "t"), std::string("\x00\xff\x10z", 4));
  EXPECT_THROW(from_hex("0g", "t"), Error);
  fs::remove_all(dir);
}

// Bad input never crashes: every truncation and many single-byte corruptions of a tensor file
// either raise titan::Error or (a flip in alignment padding, which no reader looks at) read back
// the exact original tensors.
TEST(Checkpoint, MutatedTensorFilesFailCleanly) {
  std::string dir = temp_dir("mutate");
  fs::create_directories(dir);
  auto m = model_tensors(7);
  std::string good = dir + "/good.tensors", bad = dir + "/bad.tensors";
  write_tensor_file(good, m);
  std::string bytes = read_file(good);
  auto check = [&](const std::string& mutated, const std::string& what) {
    std::ofstream(bad, std::ios::binary | std::ios::trunc) << mutated;
    try {
      TensorFileReader r(bad);
      for (auto& t : m) {
        Tensor x = r.read(t.name);
        ASSERT_EQ(std::memcmp(x.raw(), t.tensor.raw(), t.tensor.nbytes()), 0) << what << ": silent corruption";
      }
      ASSERT_EQ(r.entries().size(), m.size()) << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << what << ": " << e.what();
    }
  };
  for_each_damaged(bytes, 5, check);
  fs::remove_all(dir);
}

// Issue 10: state.json was trusted, so an edited data position or model config was accepted
// silently. It carries a CRC-32C of its own content (every field but the checksum).
TEST(Checkpoint, EditedStateJsonIsRefused) {
  std::string dir = temp_dir("state_crc");
  auto m = model_tensors(1), o = optim_tensors(1);
  CheckpointManager cm(dir, 0);
  TrainState st = state_at(5);
  st.extra["model_config"] = {{"hidden_size", 256}, {"rope_theta", 1000000.0}, {"rms_norm_eps", 1e-6}};
  cm.save(st, m, o);
  const std::string sj = dir + "/step-5/state.json";
  const std::string original = read_file(sj);
  nlohmann::json j = nlohmann::json::parse(original);
  ASSERT_TRUE(j.contains("state_crc32c")) << original;
  EXPECT_EQ(j["state_crc32c"].get<std::string>().size(), 8u);
  EXPECT_EQ(cm.read_state(5).data_state, st.data_state);
  // Re-indented but unchanged content is the same state.
  write_file_atomic(sj, j.dump());
  EXPECT_EQ(error_of([&] { cm.read_state(5); }), "");

  auto expect_refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& what) {
    nlohmann::json e = nlohmann::json::parse(original);
    edit(e);
    write_file_atomic(sj, e.dump(2));
    EXPECT_EQ(error_of([&] { cm.read_state(5); }), sj + ": checksum mismatch (edited or damaged)") << what;
    auto m2 = zeros_like(m), o2 = zeros_like(o);
    EXPECT_EQ(error_of([&] { cm.load(5, m2, o2); }), sj + ": checksum mismatch (edited or damaged)") << what;
  };
  expect_refused([](nlohmann::json& e) { e["data_state_hex"] = to_hex("{\"position\": 12345}"); }, "data position");
  expect_refused([](nlohmann::json& e) { e["extra"]["model_config"]["hidden_size"] = 512; }, "model config");
  expect_refused([](nlohmann::json& e) { e["config_hash"] = "ffffffffffffffff"; }, "config hash");
  expect_refused([](nlohmann::json& e) { e["state_crc32c"] = "00000000"; }, "checksum itself");
  expect_refused([](nlohmann::json& e) { e["state_crc32c"] = 7; }, "checksum of the wrong type");

  // A checkpoint written before state checksums (no field) still loads: the tensor files keep
  // their own CRCs, and a CRC is no signature (whoever edits on purpose can recompute it).
  nlohmann::json old = nlohmann::json::parse(original);
  old.erase("state_crc32c");
  write_file_atomic(sj, old.dump(2));
  EXPECT_EQ(cm.read_state(5).data_state, st.data_state);
  fs::remove_all(dir);
}
