// Streaming datasets (data/token_stream.h): the stream of one dataset is TokenDataset's token
// stream; a resume from any state (at another rank count too) continues with exactly the next
// token; mixtures draw documents at their weights, deterministically from the seed.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "compress_util.h"
#include "data/dataset.h"
#include "data/token_stream.h"
#include "data_test_util.h"

namespace titan::test {
namespace {

namespace fs = std::filesystem;

const auto quiet = [](const std::string&) {};

// A small C4-like shard set: two .json.gz shards and a Parquet file.
std::vector<std::string> shards(const std::string& d) {
  std::string a, b;
  for (int i = 0; i < 40; ++i) a += nlohmann::json{{"text", "shard a document " + std::to_string(i) + std::string(size_t(i % 7) * 9, 'x')}, {"url", "u"}}.dump() + "\n";
  for (int i = 0; i < 25; ++i) b += nlohmann::json{{"text", "B doc " + std::to_string(i) + " caf\u00e9"}}.dump() + "\n";
  write_bytes(d + "/c4-train.00000-of-00002.json.gz", gzip_member(a));
  write_bytes(d + "/c4-train.00001-of-00002.json.gz", gzip_member(b.substr(0, 100)) + gzip_member(b.substr(100)));
  fs::copy_file(fixture("parquet/text_dict_gzip_pages.parquet"), d + "/z.parquet", fs::copy_options::overwrite_existing);
  return {d + "/c4-train.00000-of-00002.json.gz", d + "/c4-train.00001-of-00002.json.gz", d + "/z.parquet"};
}

data::StreamOptions small_opts() {
  data::StreamOptions o;
  o.doc.skip_bad_rows = true;  // the Parquet fixture has a null row
  o.threads = 1;
  o.batch_docs = 7;
  o.queue_tokens = 300;
  return o;
}

std::vector<int64_t> take(data::TokenStream& s, size_t n) {
  std::vector<int64_t> v(n);
  s.read(n, v.data());
  return v;
}

TEST(TokenStream, OneDatasetIsTheTokenDatasetStream) {
  const std::string d = temp_dir("stream_same");
  const auto files = shards(d);
  data::DatasetSpec spec;
  spec.cache_dir = "none";
  spec.progress = false;
  spec.skip_bad_lines = true;
  spec.name_or_path = d + "/c4-train.00000-of-00002.json.gz," + d + "/c4-train.00001-of-00002.json.gz," + d + "/z.parquet";
  auto ds = data::TokenDataset::load(spec, qwen_tokenizer(), quiet);
  std::vector<int64_t> want(ds->size() * 2 + 17);  // across two epoch wraps
  ds->read(0, want.size(), want.data());
  data::TokenStream s({{"c4", files, 1.0}}, qwen_tokenizer(), small_opts(), quiet);
  std::vector<int64_t> got;
  for (size_t n : {1u, 5u, 300u, 1u, 4096u}) {
    auto v = take(s, n);
    got.insert(got.end(), v.begin(), v.end());
  }
  auto rest = take(s, want.size() - got.size());
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_EQ(got, want);
  EXPECT_EQ(s.state().consumed, want.size());
  EXPECT_EQ(s.state().sources[0].epoch, 2u);
  fs::remove_all(d);
}

TEST(TokenStream, ResumeFromAnyStateContinuesWithTheNextToken) {
  const std::string d = temp_dir("stream_resume");
  const auto files = shards(d);
  auto make = [&] {
    return std::make_unique<data::TokenStream>(
        std::vector<data::StreamSource>{{"c4", {files[0], files[1]}, 3.0}, {"pq", {files[2]}, 1.0}}, qwen_tokenizer(),
        small_opts(), quiet);
  };
  auto ref = make();
  const std::vector<int64_t> want = take(*ref, 20000);
  for (size_t cut : {0u, 1u, 2u, 517u, 518u, 4000u, 11111u}) {
    SCOPED_TRACE(cut);
    auto a = make();
    take(*a, cut);
    const std::string json = a->state().to_json();
    data::StreamState st;
    ASSERT_TRUE(data::StreamState::from_json(json, "test", &st));
    auto b = make();
    b->restore(st);
    EXPECT_EQ(b->state().to_json(), json);
    const auto got = take(*b, want.size() - cut);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin() + std::ptrdiff_t(cut)));
    const auto st2 = b->state();
    EXPECT_EQ(st2.consumed, want.size());
    EXPECT_EQ(st2.source_tokens[0] + st2.source_tokens[1], want.size());
  }
  // Another dataset list is refused.
  data::StreamState st;
  ASSERT_TRUE(data::StreamState::from_json(ref->state().to_json(), "test", &st));
  data::TokenStream other({{"c4", {files[0], files[1]}, 1.0}}, qwen_tokenizer(), small_opts(), quiet);
  EXPECT_ERROR_HAS(other.restore(st), "resuming would not continue at the next token");
  EXPECT_FALSE(data::StreamState::from_json("{\"position\": 3, \"dataset_tokens\": 5}", "test", &st));
  fs::remove_all(d);
}

TEST(TokenStream, GlobalBatchesAndResumeAtAnotherRankCount) {
  const std::string d = temp_dir("stream_ranks");
  const auto files = shards(d);
  auto make = [&] {
    return std::make_unique<data::TokenStream>(std::vector<data::StreamSource>{{"c4", files, 1.0}}, qwen_tokenizer(),
                                               small_opts(), quiet);
  };
  auto flat = [](const Tensor& t) { return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel()); };
  // World 1 x local 4 == world 2 x local 2 (rank 0 then rank 1), step after step; at step 3 the
  // two-rank run is stopped and resumed on one rank with local 4... and on four ranks of 1.
  auto one = make();
  std::vector<std::unique_ptr<data::TokenStream>> two;
  two.push_back(make()), two.push_back(make());
  std::string saved;
  for (int step = 0; step < 6; ++step) {
    SCOPED_TRACE(step);
    const auto w = one->next_batch(4, 33, 0, 1);
    if (step < 3) {
      auto r0 = two[0]->next_batch(2, 33, 0, 2), r1 = two[1]->next_batch(2, 33, 1, 2);
      auto both = flat(r0.inputs), b1 = flat(r1.inputs);
      both.insert(both.end(), b1.begin(), b1.end());
      EXPECT_EQ(both, flat(w.inputs));
      EXPECT_EQ(two[0]->state().to_json(), two[1]->state().to_json());
      saved = two[0]->state().to_json();
    } else {
      if (step == 3) {
        two.clear();
        data::StreamState st;
        ASSERT_TRUE(data::StreamState::from_json(saved, "test", &st));
        for (int r = 0; r < 4; ++r) two.push_back(make()), two.back()->restore(st);
      }
      std::vector<int64_t> all, labels;
      for (int r = 0; r < 4; ++r) {
        auto b = two[size_t(r)]->next_batch(1, 33, r, 4);
        auto x = flat(b.inputs), y = flat(b.labels);
        all.insert(all.end(), x.begin(), x.end());
        labels.insert(labels.end(), y.begin(), y.end());
      }
      EXPECT_EQ(all, flat(w.inputs));
      EXPECT_EQ(labels, flat(w.labels));
    }
  }
  fs::remove_all(d);
}

TEST(TokenStream, MixturesDrawAtTheirWeightsFromTheSeed) {
  const std::string d = temp_dir("stream_mix");
  std::string a, b;
  for (int i = 0; i < 50; ++i) a += "{\"text\": \"a\"}\n", b += "{\"text\": \"b\"}\n";
  write_bytes(d + "/a.jsonl", a);
  write_bytes(d + "/b.jsonl.zst", zstd_frame(b));
  auto opts = small_opts();
  const uint32_t ta = qwen_tokenizer().encode("a")[0], tb = qwen_tokenizer().encode("b")[0];
  auto run = [&](uint64_t seed) {
    opts.seed = seed;
    data::TokenStream s({{"a", {d + "/a.jsonl"}, 0.8}, {"b", {d + "/b.jsonl.zst"}, 0.2}}, qwen_tokenizer(), opts, quiet);
    auto v = take(s, 2 * 20000);  // 20000 documents of 2 tokens
    EXPECT_EQ(s.source_tokens()[0] + s.source_tokens()[1], v.size());
    return v;
  };
  const auto x = run(1), y = run(1), z = run(2);
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
  const double frac_a = double(std::count(x.begin(), x.end(), int64_t(ta))) / 20000.0;
  EXPECT_EQ(std::count(x.begin(), x.end(), int64_t(ta)) + std::count(x.begin(), x.end(), int64_t(tb)), 20000);
  EXPECT_NEAR(frac_a, 0.8, 0.015);  // binomial sd 0.0028
  fs::remove_all(d);
}

}  // namespace
}  // namespace titan::test
