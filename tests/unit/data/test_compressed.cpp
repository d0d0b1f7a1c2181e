// Compressed JSON lines (.jsonl.gz with several members, .jsonl.zst with several frames) read as
// their plain text; damaged files, unknown extensions and invalid UTF-8 are one-line errors naming
// the file (and the row), and skip_bad_rows skips and counts bad rows.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "common/test_util.h"
#include "compress_util.h"
#include "data/chat_data.h"
#include "data/compressed.h"
#include "data/dataset.h"
#include "data/doc_reader.h"
#include "data_test_util.h"
#include "util/strings.h"

namespace titan::test {
namespace {

std::vector<std::string> texts_of(const std::string& path, data::DocOptions o = {}) {
  auto r = data::open_doc_reader(path, o);
  std::vector<std::string> out;
  data::Document d;
  while (r->next(&d)) out.push_back(d.text);
  return out;
}

// n JSON lines of random words, some long: lines cross the readers' 1 MiB pieces.
std::string random_jsonl(int n, std::vector<std::string>* texts) {
  std::mt19937 g(7);
  std::string out;
  for (int i = 0; i < n; ++i) {
    std::string t;
    const int words = (i % 97 == 0) ? 20000 : int(g() % 60) + 1;
    for (int w = 0; w < words; ++w) t += (w ? " " : "") + std::string("w") + std::to_string(g() % 1000) + (i % 5 ? "" : "\u00e9");
    texts->push_back(t);
    out += "{\"text\": \"" + t + "\", \"id\": " + std::to_string(i) + "}\n";
  }
  return out;
}

TEST(Compressed, GzipMembersAndZstdFramesReadAsThePlainText) {
  const std::string d = temp_dir("compressed_read");
  std::vector<std::string> want;
  const std::string plain = random_jsonl(3000, &want);
  ASSERT_GT(plain.size(), size_t(3) << 20);
  const size_t half = plain.find('\n', plain.size() / 2) + 1;
  // Members and frames split inside a line, too.
  write_bytes(d + "/a.jsonl.gz", gzip_member(plain.substr(0, half + 5)) + gzip_member(plain.substr(half + 5)));
  write_bytes(d + "/a.jsonl.zst", zstd_frame(plain.substr(0, half - 3)) + zstd_frame(plain.substr(half - 3)));
  write_bytes(d + "/a.json.gz", gzip_member(plain));
  write_bytes(d + "/a.jsonl", plain);
  for (const char* f : {"a.jsonl", "a.jsonl.gz", "a.jsonl.zst", "a.json.gz"}) {
    SCOPED_TRACE(f);
    EXPECT_EQ(texts_of(d + "/" + f), want);
  }
  // A plain .txt.gz is one document, as the .txt.
  write_bytes(d + "/b.txt.gz", gzip_member("hello\nworld\n"));
  EXPECT_EQ(texts_of(d + "/b.txt.gz"), std::vector<std::string>{"hello\nworld\n"});
  // The token stream of a compressed file is that of the plain one.
  data::DatasetSpec spec;
  spec.cache_dir = "none";
  spec.progress = false;
  spec.name_or_path = d + "/a.jsonl";
  auto plain_ds = data::TokenDataset::load(spec, qwen_tokenizer(), [](const std::string&) {});
  spec.name_or_path = d + "/a.jsonl.zst";
  auto zst_ds = data::TokenDataset::load(spec, qwen_tokenizer(), [](const std::string&) {});
  ASSERT_EQ(plain_ds->size(), zst_ds->size());
  std::vector<int64_t> a(plain_ds->size()), b(zst_ds->size());
  plain_ds->read(0, a.size(), a.data());
  zst_ds->read(0, b.size(), b.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(zst_ds->documents(), 3000u);
  // A folder lists the compressed files with the others.
  EXPECT_EQ(data::resolve_dataset_files(d).size(), 5u);
  std::filesystem::remove_all(d);
}

TEST(Compressed, DamageIsAnErrorNamingTheFileAndLine) {
  const std::string d = temp_dir("compressed_bad");
  std::string plain;
  for (int i = 0; i < 20000; ++i) plain += "{\"text\": \"line " + std::to_string(i) + " of a test\"}\n";
  const std::string gz = gzip_member(plain), zst = zstd_frame(plain);
  // Truncated: the file ends inside the member or frame.
  write_bytes(d + "/t.jsonl.gz", gz.substr(0, gz.size() / 2));
  EXPECT_ERROR_HAS(texts_of(d + "/t.jsonl.gz"), "t.jsonl.gz: truncated: ends inside a gzip member, after line ");
  write_bytes(d + "/t.jsonl.zst", zst.substr(0, zst.size() / 2));
  EXPECT_ERROR_HAS(texts_of(d + "/t.jsonl.zst"), "t.jsonl.zst: truncated: ends inside a zstd frame, after line ");
  // Corrupt: bytes inside the compressed data changed (deflate notices, or the CRC does).
  std::string bad = gz;
  for (size_t i = bad.size() / 3; i < bad.size() / 3 + 16; ++i) bad[i] = char(bad[i] ^ 0x5a);
  write_bytes(d + "/c.jsonl.gz", bad);
  // The garbage decoded before the CRC check fails as a row; skipping bad rows, the CRC still fails.
  std::string msg = error_of([&] { texts_of(d + "/c.jsonl.gz"); });
  EXPECT_NE(msg.find("c.jsonl.gz:"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  data::DocOptions skip;
  skip.skip_bad_rows = true;
  msg = error_of([&] { texts_of(d + "/c.jsonl.gz", skip); });
  EXPECT_NE(msg.find("c.jsonl.gz: corrupt gzip data, after line "), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  bad = zst;
  for (size_t i = bad.size() / 3; i < bad.size() / 3 + 16; ++i) bad[i] = char(bad[i] ^ 0x5a);
  write_bytes(d + "/c.jsonl.zst", bad);
  EXPECT_ERROR_HAS(texts_of(d + "/c.jsonl.zst"), "c.jsonl.zst: corrupt zstd data, ");
  // Not gzip at all, and garbage after the last member.
  write_bytes(d + "/p.jsonl.gz", plain);
  EXPECT_ERROR_HAS(texts_of(d + "/p.jsonl.gz"), "p.jsonl.gz: not gzip data (no gzip header), before the first line");
  write_bytes(d + "/g.jsonl.gz", gz + "garbage");
  EXPECT_ERROR_HAS(texts_of(d + "/g.jsonl.gz"), "g.jsonl.gz: bytes after the last gzip member that start no member, after line 20000");
  std::filesystem::remove_all(d);
}

TEST(Compressed, UnknownExtensionsAndInvalidUtf8AreErrors) {
  const std::string d = temp_dir("compressed_formats");
  // The case: compressed bytes were once trained on as one text document.
  write_bytes(d + "/x.jsonl.xz", "\xfd" "7zXZ\x00\x00");
  EXPECT_ERROR_HAS(data::resolve_dataset_files(d + "/x.jsonl.xz"), "x.jsonl.xz: not a dataset format this build reads");
  write_bytes(d + "/x.csv", "a,b\n");
  data::DatasetSpec spec;
  spec.cache_dir = "none";
  spec.progress = false;
  spec.name_or_path = d + "/x.csv";
  EXPECT_ERROR_HAS(data::TokenDataset::load(spec, qwen_tokenizer()), "x.csv: not a dataset format");
  // A .txt that is not UTF-8.
  write_bytes(d + "/latin1.txt", "caf\xe9 au lait\n");
  spec.name_or_path = d + "/latin1.txt";
  EXPECT_ERROR_HAS(data::TokenDataset::load(spec, qwen_tokenizer()), "latin1.txt: not valid UTF-8 text (byte 3)");
  // A JSON line with invalid UTF-8: an error naming the row, or skipped and counted.
  write_bytes(d + "/u.jsonl.gz", gzip_member("{\"text\": \"ok\"}\n{\"text\": \"caf\xe9\"}\n{\"text\": \"fine\"}\n"));
  spec.name_or_path = d + "/u.jsonl.gz";
  EXPECT_ERROR_HAS(data::TokenDataset::load(spec, qwen_tokenizer()), "u.jsonl.gz:2: not valid UTF-8 (byte 14 of the line)");
  spec.skip_bad_lines = true;
  std::vector<std::string> logs;
  auto ds = data::TokenDataset::load(spec, qwen_tokenizer(), [&](const std::string& s) { logs.push_back(s); });
  EXPECT_EQ(ds->documents(), 2u);
  bool counted = false;
  for (auto& l : logs) counted |= l.find("skipped 1 bad rows") != std::string::npos;
  EXPECT_TRUE(counted);
  // Chat conversations from a compressed file, a bad one skipped and counted.
  write_bytes(d + "/chat.jsonl.zst",
              zstd_frame("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
                         "\"content\": \"hello\"}]}\n{\"messages\": 3}\n"));
  data::ChatEncoder enc(data::ChatTemplate::load(std::string(TITAN_SOURCE_DIR) + "/assets/qwen3-tokenizer"),
                        qwen_tokenizer());
  EXPECT_ERROR_HAS(data::ChatRows::load({d + "/chat.jsonl.zst"}, enc, 64, false), "chat.jsonl.zst:2: \"messages\"");
  data::DocOptions o;
  o.skip_bad_rows = true;
  auto rows = data::ChatRows::load({d + "/chat.jsonl.zst"}, enc, 64, false, o);
  EXPECT_EQ(rows.conversations, 1u);
  EXPECT_EQ(rows.skipped, 1u);
  std::filesystem::remove_all(d);
}

}  // namespace
}  // namespace titan::test
