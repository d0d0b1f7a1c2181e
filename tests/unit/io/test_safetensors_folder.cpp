// SafetensorsFolder / SafetensorsFolderWriter on their own, with tensor names that mean nothing
// (the HF model mapping lives in model/hf_checkpoint.h): a round trip single-file and sharded, the
// shard plan, the index metadata, stale files of an earlier write removed, and the errors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/safetensors_folder.h"
#include "io_test_util.h"
#include "util/strings.h"

using namespace titan;
using namespace titan::iotest;
namespace fs = std::filesystem;

namespace {

std::vector<SafetensorsSpec> layout() {  // 3 x 64 bytes + 40 bytes in bf16
  return {{"zeta", DType::BF16, {4, 8}}, {"alpha.b", DType::BF16, {32}}, {"m", DType::BF16, {2, 16}}, {"x", DType::BF16, {20}}};
}

void write_all(const std::string& dir, uint64_t max_shard_bytes, const nlohmann::json& meta = nlohmann::json::object()) {
  SafetensorsFolderWriter w(dir, layout(), max_shard_bytes, "write " + dir);
  int seed = 0;
  for (const auto& s : layout()) w.add(s.name, exact_tensor(s.shape, seed++));
  w.finish(meta);
}

TEST(SafetensorsFolder, RoundTripSingleFileAndSharded) {
  for (uint64_t max : {uint64_t(1) << 20, uint64_t(110)}) {
    TempDir d;
    write_all(d.path, max, {{"note", "n"}});
    const SafetensorsFolder f = SafetensorsFolder::open(d.path + "//");
    EXPECT_EQ(f.dir(), d.path);
    ASSERT_EQ(f.tensors().size(), 4u);
    int seed = 0;
    for (const auto& s : layout()) {
      ASSERT_TRUE(f.contains(s.name)) << s.name;
      const Tensor t = f.file_of(s.name).get(s.name, DType::F32);
      const Tensor want = exact_tensor(s.shape, seed++);
      EXPECT_EQ(std::memcmp(t.raw(), want.raw(), size_t(want.nbytes())), 0) << s.name;
    }
    if (max > 1000) {
      EXPECT_EQ(f.files().size(), 1u);
      EXPECT_TRUE(fs::exists(d / SafetensorsFolder::kSingleFile));
      EXPECT_FALSE(fs::exists(d / SafetensorsFolder::kIndexFile));
    } else {  // 64 + 64 > 110: a shard per 64-byte tensor, the last two (64 + 40) together
      EXPECT_EQ(f.files().size(), 3u);
      const auto index = nlohmann::json::parse(read_file(d / SafetensorsFolder::kIndexFile));
      EXPECT_EQ(index["metadata"]["total_size"], 232);
      EXPECT_EQ(index["metadata"]["note"], "n");
      EXPECT_EQ(index["weight_map"]["zeta"], "model-00001-of-00003.safetensors");
      EXPECT_EQ(index["weight_map"]["x"], "model-00003-of-00003.safetensors");
    }
    EXPECT_ERROR_CONTAINS(f.file_of("nope"), d.path + ": no tensor \"nope\"");
  }
}

TEST(SafetensorsFolder, RewriteRemovesTheOtherLayoutsFiles) {
  TempDir d;
  write_all(d.path, 110);
  ASSERT_TRUE(fs::exists(d / "model-00003-of-00003.safetensors"));
  fs::copy_file(d / "model-00001-of-00003.safetensors", d / "model-00009-of-00009.safetensors");
  write_all(d.path, uint64_t(1) << 20);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(d.path)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"model.safetensors"});
}

TEST(SafetensorsFolder, WriterErrors) {
  TempDir d;
  EXPECT_ERROR_CONTAINS(SafetensorsFolderWriter(d.path, layout(), 0, "w"), "w: max shard size must be positive");
  EXPECT_ERROR_CONTAINS(SafetensorsFolderWriter(d.path, {}, 100, "w"), "w: no tensors to write");
  SafetensorsFolderWriter w(d.path, layout(), 100, "w");
  EXPECT_ERROR_CONTAINS(w.add("alpha.b", exact_tensor({32}, 0)), "w: tensor \"alpha.b\" is not the next one");
  w.add("zeta", exact_tensor({4, 8}, 0));
  EXPECT_ERROR_CONTAINS(w.finish(), "w: 3 tensors were not written");
  EXPECT_EQ(w.added(), 1u);
}

TEST(SafetensorsFolder, OpenErrors) {
  TempDir d;
  EXPECT_ERROR_CONTAINS(SafetensorsFolder::open(d / "nope"), "nope: not a checkpoint folder");
  EXPECT_ERROR_CONTAINS(SafetensorsFolder::open(d.path), "no model.safetensors or model.safetensors.index.json");
  write_all(d.path, 110);
  write_file_atomic(d / SafetensorsFolder::kIndexFile, R"({"weight_map": {"zeta": "../x.safetensors"}})");
  EXPECT_ERROR_CONTAINS(SafetensorsFolder::open(d.path), "escapes the folder");
  write_file_atomic(d / SafetensorsFolder::kIndexFile, R"({"weight_map": {"zeta": "model-00002-of-00003.safetensors"}})");
  EXPECT_ERROR_CONTAINS(SafetensorsFolder::open(d.path), "puts tensor \"zeta\" in \"model-00002-of-00003.safetensors\"");
}

}  // namespace
