// Hugging Face dataset folders (data/<split>-NNNNN-of-NNNNN.<ext>) in shard order, F/<split>,
// $TITAN_DATASETS_DIR, incomplete shard sets, and globs.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "common/test_util.h"
#include "compress_util.h"
#include "data/dataset.h"
#include "data/hf_folder.h"
#include "data_test_util.h"
#include "util/strings.h"

namespace titan::test {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> names(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (auto& p : paths) out.push_back(fs::path(p).filename().string());
  return out;
}

TEST(HfFolder, SplitsInShardOrderAndIncompleteSets) {
  const std::string root = temp_dir("hf_folder");
  const std::string f = root + "/org/ds";
  fs::create_directories(f + "/data");
  write_bytes(f + "/README.md", "# a dataset card\n");
  for (int i : {2, 0, 1})
    write_bytes(f + "/data/train-0000" + std::to_string(i) + "-of-00003.jsonl.gz",
                gzip_member("{\"text\": \"shard " + std::to_string(i) + "\"}\n"));
  fs::copy_file(fixture("parquet/text_plain_snappy.parquet"), f + "/data/validation-00000-of-00001-4f2a9c.parquet");
  const std::vector<std::string> train = {"train-00000-of-00003.jsonl.gz", "train-00001-of-00003.jsonl.gz",
                                          "train-00002-of-00003.jsonl.gz"};
  EXPECT_EQ(names(data::resolve_dataset_files(f)), train);
  EXPECT_EQ(names(data::resolve_dataset_files(f + "/validation")),
            std::vector<std::string>{"validation-00000-of-00001-4f2a9c.parquet"});
  EXPECT_ERROR_HAS(data::resolve_dataset_files(f + "/test"),
                   "ds: a Hugging Face dataset folder without a 'test' split (its splits: train, validation)");
  // The tokens follow the shard order.
  data::DatasetSpec spec;
  spec.cache_dir = "none";
  spec.progress = false;
  spec.name_or_path = f;
  auto ds = data::TokenDataset::load(spec, qwen_tokenizer(), [](const std::string&) {});
  std::vector<int64_t> t(ds->size());
  ds->read(0, t.size(), t.data());
  std::vector<uint32_t> ids(t.begin(), t.end());
  EXPECT_EQ(qwen_tokenizer().decode(ids), "shard 0<|endoftext|>shard 1<|endoftext|>shard 2<|endoftext|>");
  // Under $TITAN_DATASETS_DIR by name, and name/split.
  ::setenv("TITAN_DATASETS_DIR", root.c_str(), 1);
  EXPECT_EQ(names(data::resolve_dataset_files("org/ds")), train);
  EXPECT_EQ(data::resolve_dataset_files("org/ds/validation").size(), 1u);
  EXPECT_ERROR_HAS(data::resolve_dataset_files("org/nope"), "nor one under $TITAN_DATASETS_DIR");
  ::unsetenv("TITAN_DATASETS_DIR");
  // A missing shard, a duplicate, mixed counts.
  fs::rename(f + "/data/train-00001-of-00003.jsonl.gz", root + "/away.jsonl.gz");
  EXPECT_ERROR_HAS(data::resolve_dataset_files(f), "split 'train' lacks shard 1 of 3 (an incomplete download?)");
  fs::rename(root + "/away.jsonl.gz", f + "/data/train-00001-of-00003.jsonl.gz");
  write_bytes(f + "/data/train-00001-of-00003.parquet", "x");
  EXPECT_ERROR_HAS(data::resolve_dataset_files(f), "split 'train' has two files for shard 1");
  fs::remove(f + "/data/train-00001-of-00003.parquet");
  write_bytes(f + "/data/train-00003-of-00004.jsonl", "{\"text\": \"x\"}\n");
  EXPECT_ERROR_HAS(data::resolve_dataset_files(f), "split 'train' mixes shard counts 3 and 4");
  fs::remove(f + "/data/train-00003-of-00004.jsonl");
  // The last shard missing.
  fs::remove(f + "/data/train-00002-of-00003.jsonl.gz");
  EXPECT_ERROR_HAS(data::resolve_dataset_files(f), "split 'train' has 2 of its 3 shards");
  fs::remove_all(root);
}

TEST(HfFolder, Globs) {
  const std::string d = temp_dir("hf_glob");
  fs::create_directories(d + "/en");
  for (int i = 0; i < 4; ++i)
    write_bytes(d + "/en/c4-train.0000" + std::to_string(i) + "-of-01024.json.gz",
                gzip_member("{\"text\": \"doc " + std::to_string(i) + "\"}\n"));
  EXPECT_EQ(names(data::resolve_dataset_files(d + "/en/c4-train.*-of-01024.json.gz")),
            (std::vector<std::string>{"c4-train.00000-of-01024.json.gz", "c4-train.00001-of-01024.json.gz",
                                      "c4-train.00002-of-01024.json.gz", "c4-train.00003-of-01024.json.gz"}));
  EXPECT_EQ(data::resolve_dataset_files(d + "/en/c4-train.0000[0-1]-of-01024.json.gz").size(), 2u);
  EXPECT_EQ(data::resolve_dataset_files(d + "/e?").size(), 4u);  // a folder matched
  EXPECT_ERROR_HAS(data::resolve_dataset_files(d + "/en/c4-validation.*"), "matches no files");
  write_bytes(d + "/en/notes.md", "x");
  EXPECT_ERROR_HAS(data::resolve_dataset_files(d + "/en/*"), "notes.md: not a dataset format");
  fs::remove_all(d);
}

}  // namespace
}  // namespace titan::test
