// Token files, JSON-lines reading, datasets and the packing loader: round trips, every bad-input
// error, sharding independent of the world size, and exact resume.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "common/test_util.h"
#include "data_test_util.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/jsonl.h"
#include "data/packed_loader.h"
#include "data/token_file.h"
#include "util/strings.h"

namespace titan::test {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("titan_data_test_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::string file(const std::string& name, const std::string& content) const {
    std::string p = (path / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

TEST(TokenFile, RoundTripAndEveryCorruption) {
  TempDir d;
  std::string p = d / "t.bin";
  {
    data::TokenFileWriter w(p, 100, 99, 1234);
    w.add_document({1, 2, 3});
    w.add_document({});
    w.add_document({42});
    w.close();
  }
  auto f = data::TokenFile::open(p);
  EXPECT_EQ(f->header().vocab_size, 100u);
  EXPECT_EQ(f->header().document_count, 3u);
  EXPECT_EQ(f->header().tokenizer_fingerprint, 1234u);
  ASSERT_EQ(f->size(), 7u);
  EXPECT_EQ(std::vector<uint32_t>(f->tokens(), f->tokens() + 7), (std::vector<uint32_t>{1, 2, 3, 99, 99, 42, 99}));

  std::string bytes = read_file(p);
  // Truncated: the last id is cut off.
  std::string trunc = d.file("trunc.bin", bytes.substr(0, bytes.size() - 3));
  EXPECT_ERROR_HAS(data::TokenFile::open(trunc), "truncated");
  EXPECT_ERROR_HAS(data::TokenFile::open(trunc), "trunc.bin");
  // Only part of the header.
  EXPECT_ERROR_HAS(data::TokenFile::open(d.file("short.bin", bytes.substr(0, 20))), "shorter than the 64-byte header");
  // Id >= vocab size.
  std::string badid = bytes;
  uint32_t big = 100;
  std::memcpy(&badid[64 + 4 * 5], &big, 4);
  EXPECT_ERROR_HAS(data::TokenFile::open(d.file("badid.bin", badid)), "token 5 has id 100, not below the vocab size 100");
  std::string magic = bytes;
  magic[0] = 'X';
  EXPECT_ERROR_HAS(data::TokenFile::open(d.file("magic.bin", magic)), "bad magic");
  EXPECT_ERROR_HAS(data::TokenFile::open(d.file("extra.bin", bytes + "xx")), "unexpected bytes");
  // The writer refuses ids outside the vocabulary and leaves no file behind.
  {
    data::TokenFileWriter w(d / "w.bin", 10, 9, 0);
    EXPECT_ERROR_HAS(w.add_document({10}), "token id 10 >= vocab size 10");
  }
  EXPECT_FALSE(fs::exists(d / "w.bin"));
}

TEST(Jsonl, ReadsEscapesAndReportsBadLines) {
  std::vector<std::string> got;
  auto collect = [&](std::string&& t) { got.push_back(std::move(t)); };
  std::istringstream ok(
      "{\"text\": \"a\\/b \\\"q\\\" \\u00e9 \\ud83d\\ude00\\n\", \"url\": \"x\"}\n\n  \n{\"text\":\"\"}\n");
  data::JsonlStats st;
  data::read_jsonl(ok, "ok.jsonl", {}, collect, &st);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], "a/b \"q\" \xc3\xa9 \xf0\x9f\x98\x80\n");
  EXPECT_EQ(got[1], "");
  EXPECT_EQ(st.lines, 4u);

  auto run = [&](const std::string& text, bool skip, data::JsonlStats* s) {
    std::istringstream in(text);
    data::JsonlOptions o;
    o.skip_bad_lines = skip;
    data::read_jsonl(in, "f.jsonl", o, collect, s);
  };
  EXPECT_ERROR_HAS(run("{\"text\":\"a\"}\n{\"text\": \"b\n", false, nullptr), "f.jsonl:2: malformed JSON");
  EXPECT_ERROR_HAS(run("{\"text\":\"a\"}\n{\"body\": \"b\"}\n", false, nullptr), "f.jsonl:2: no \"text\" field");
  EXPECT_ERROR_HAS(run("{\"text\": 5}\n", false, nullptr), "f.jsonl:1: the \"text\" field is not a string");
  EXPECT_ERROR_HAS(run("[1,2]\n", false, nullptr), "f.jsonl:1: the line is not a JSON object");
  EXPECT_ERROR_HAS(run("{\"text\": \"\xff\"}\n", false, nullptr), "f.jsonl:1: malformed JSON");
  got.clear();
  data::JsonlStats s2;
  run("{\"text\":\"a\"}\n{oops\n{\"body\":1}\n{\"text\":\"b\"}\n", true, &s2);
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s2.skipped, 2u);
  EXPECT_EQ(s2.documents, 2u);
}

TEST(Dataset, RegistryCacheAndBadSources) {
  const auto& tok = qwen_tokenizer();
  TempDir d;
  data::DatasetSpec spec;
  spec.name_or_path = "c4_demo";
  spec.cache_dir = d / "cache";
  spec.progress = false;
  std::vector<std::string> logs;
  auto log = [&](const std::string& s) { logs.push_back(s); };
  auto a = data::TokenDataset::load(spec, tok, log);
  auto b = data::TokenDataset::load(spec, tok, log);  // second load maps the cache
  ASSERT_FALSE(logs.empty());
  EXPECT_NE(logs.back().find("from cache"), std::string::npos);
  EXPECT_EQ(a->documents(), 300u);
  ASSERT_EQ(a->size(), b->size());
  std::vector<int64_t> ta(a->size()), tb(b->size());
  a->read(0, ta.size(), ta.data());
  b->read(0, tb.size(), tb.data());
  EXPECT_EQ(ta, tb);
  // The stream is the documents' ids each followed by <|endoftext|>: count separators, and compare
  // the first document against a direct encode.
  EXPECT_EQ(std::count(ta.begin(), ta.end(), 151643), 300);
  std::ifstream in(data::data_root() + "/c4_sample/c4_demo_300.jsonl");
  std::string line, text, why;
  std::getline(in, line);
  ASSERT_TRUE(data::parse_jsonl_line(line, "text", &text, &why));
  auto first = tok.encode(text);
  ASSERT_LT(first.size(), ta.size());
  EXPECT_TRUE(std::equal(first.begin(), first.end(), ta.begin()));
  EXPECT_EQ(ta[first.size()], 151643);
  // Without a cache the tokens are the same.
  spec.cache_dir = "none";
  auto c = data::TokenDataset::load(spec, tok, log);
  std::vector<int64_t> tc(c->size());
  c->read(0, tc.size(), tc.data());
  EXPECT_EQ(ta, tc);

  spec.cache_dir = "none";
  spec.name_or_path = "c4_tset";
  EXPECT_ERROR_HAS(data::TokenDataset::load(spec, tok, log), "did you mean c4_test");
  spec.name_or_path = d.file("empty.jsonl", "\n\n");
  EXPECT_ERROR_HAS(data::TokenDataset::load(spec, tok, log), "empty.jsonl: no documents");
  spec.name_or_path = d.file("empty.txt", "");
  EXPECT_ERROR_HAS(data::TokenDataset::load(spec, tok, log), "empty.txt: empty file");
  spec.name_or_path = d.file("bad.jsonl", "{\"text\":\"a\"}\n{\"text\":\n");
  EXPECT_ERROR_HAS(data::TokenDataset::load(spec, tok, log), "bad.jsonl:2: malformed JSON");
  spec.skip_bad_lines = true;
  EXPECT_EQ(data::TokenDataset::load(spec, tok, log)->documents(), 1u);
  spec.skip_bad_lines = false;
  spec.name_or_path = d.file("notext.jsonl", "{\"content\":\"a\"}\n");
  EXPECT_ERROR_HAS(data::TokenDataset::load(spec, tok, log), "notext.jsonl:1: no \"text\" field");
  // Plain text: the whole file is one document.
  spec.name_or_path = d.file("plain.txt", "Hello\nworld\n");
  auto p = data::TokenDataset::load(spec, tok, log);
  EXPECT_EQ(p->documents(), 1u);
  EXPECT_EQ(p->size(), tok.encode("Hello\nworld\n").size() + 1);
  // Token files: one from another tokenizer is refused, an empty one too.
  {
    data::TokenFileWriter w(d / "other.bin", 1000, 999, 777);
    w.add_document({1, 2});
    w.close();
    data::TokenFileWriter e(d / "none.bin", 1000, 0xFFFFFFFFu, 0);
    e.close();
  }
  spec.name_or_path = d / "other.bin";
  EXPECT_ERROR_HAS(data::TokenDataset::load(spec, tok, log), "different tokenizer");
  spec.name_or_path = d / "none.bin";
  EXPECT_ERROR_HAS(data::TokenDataset::load(spec, tok, log), "none.bin: no tokens");
}

std::shared_ptr<const data::TokenDataset> counting_dataset(uint32_t n) {
  std::vector<uint32_t> t(n);
  std::iota(t.begin(), t.end(), 0u);
  return data::TokenDataset::from_tokens("count", t);
}

std::vector<int64_t> flat(const Tensor& t) { return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel()); }

TEST(PackedLoader, WindowsShiftAndWrap) {
  std::vector<std::string> logs;
  data::PackedLoader L(counting_dataset(10), true, [&](const std::string& s) { logs.push_back(s); });
  auto b = L.next_batch(2, 3, 0, 1);  // windows [0..3], [4..7]
  EXPECT_EQ(flat(b.inputs), (std::vector<int64_t>{0, 1, 2, 4, 5, 6}));
  EXPECT_EQ(flat(b.labels), (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));
  EXPECT_TRUE(logs.empty());
  b = L.next_batch(2, 3, 0, 1);  // windows [8,9,0,1], [2..5]: wraps into epoch 2
  EXPECT_EQ(flat(b.inputs), (std::vector<int64_t>{8, 9, 0, 2, 3, 4}));
  EXPECT_EQ(flat(b.labels), (std::vector<int64_t>{9, 0, 1, 3, 4, 5}));
  EXPECT_EQ(b.epoch, 0u);
  EXPECT_EQ(L.epoch(), 1u);
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_NE(logs[0].find("epoch 1 done"), std::string::npos);
  // Single pass: stops before a global batch that would not fit.
  data::PackedLoader once(counting_dataset(10), false, nullptr);
  data::Batch x;
  EXPECT_TRUE(once.next_batch(1, 4, 0, 1, &x));
  EXPECT_TRUE(once.next_batch(1, 4, 0, 1, &x));
  EXPECT_FALSE(once.next_batch(1, 4, 0, 1, &x));
  EXPECT_ERROR_HAS(once.next_batch(1, 4, 0, 1), "exhausted");
}

TEST(PackedLoader, GlobalBatchIndependentOfWorldSize) {
  auto data = counting_dataset(997);  // prime: windows straddle the wrap at different places
  const int64_t S = 7, G = 8, steps = 40;
  auto global = [&](int world) {
    std::vector<data::PackedLoader> ranks;
    for (int r = 0; r < world; ++r) ranks.emplace_back(data, true, nullptr);
    std::vector<int64_t> all;
    for (int s = 0; s < steps; ++s)
      for (int r = 0; r < world; ++r) {
        auto b = ranks[size_t(r)].next_batch(G / world, S, r, world);
        auto in = flat(b.inputs);
        all.insert(all.end(), in.begin(), in.end());
      }
    for (int r = 1; r < world; ++r) EXPECT_EQ(ranks[size_t(r)].state(), ranks[0].state());
    return all;
  };
  auto w1 = global(1);
  EXPECT_EQ(global(2), w1);
  EXPECT_EQ(global(4), w1);
  EXPECT_EQ(global(8), w1);
}

TEST(PackedLoader, ResumeContinuesWithTheNextToken) {
  const auto& tok = qwen_tokenizer();
  data::DatasetSpec spec;
  spec.name_or_path = "c4_demo";
  spec.cache_dir = "none";
  spec.progress = false;
  auto data = data::TokenDataset::load(spec, tok, nullptr);
  const int64_t B = 4, S = 64;
  data::PackedLoader straight(data, true, nullptr);
  std::vector<std::vector<int64_t>> ref;
  for (int i = 0; i < 12; ++i) ref.push_back(flat(straight.next_batch(B, S, 0, 1).labels));

  data::PackedLoader first(data, true, nullptr);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(flat(first.next_batch(B, S, 0, 1).labels), ref[size_t(i)]);
  std::string saved = first.state().to_json();
  // Resume on two ranks with half the local batch: the same global batches follow.
  for (int i = 5; i < 12; ++i) {
    std::vector<int64_t> got;
    for (int r = 0; r < 2; ++r) {
      data::PackedLoader resumed(data, true, nullptr);
      resumed.restore(data::LoaderState::from_json(saved, "state.json"));
      auto l = flat(resumed.next_batch(B / 2, S, r, 2).labels);
      got.insert(got.end(), l.begin(), l.end());
      if (r == 1) saved = resumed.state().to_json();
    }
    EXPECT_EQ(got, ref[size_t(i)]) << "step " << i;
  }
  data::LoaderState bad{10, data->size() + 1};
  data::PackedLoader other(data, true, nullptr);
  EXPECT_ERROR_HAS(other.restore(bad), "resuming would not continue");
  EXPECT_ERROR_HAS(data::LoaderState::from_json("{\"position\": -1}", "s.json"), "s.json");
}

}  // namespace
}  // namespace titan::test
