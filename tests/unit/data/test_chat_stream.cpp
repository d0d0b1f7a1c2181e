// Streamed chat data (data/chat_stream.h): the rows are ChatRows' rows of the whole dataset, epoch
// after epoch, for any number of encoding threads; global micro-batches are the same for any rank
// count, and a resume at another rank count continues with the next row; bad data is an error
// naming its file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "compress_util.h"
#include "data/chat_data.h"
#include "data/chat_stream.h"
#include "data_test_util.h"

namespace titan::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const auto quiet = [](const std::string&) {};

const data::ChatEncoder& encoder() {
  static const data::ChatEncoder enc(
      data::ChatTemplate::load(std::string(TITAN_SOURCE_DIR) + "/assets/qwen3-tokenizer"), qwen_tokenizer());
  return enc;
}

// Conversations of varied lengths (every seventh far longer than a row of 64 tokens), a
// .jsonl.gz of the messages form and a plain .jsonl of the instruction form.
std::vector<std::string> chat_files(const std::string& d) {
  std::string a, b;
  for (int i = 0; i < 23; ++i) {
    std::string q = "What is " + std::to_string(i) + " + " + std::to_string(i * 3) + "?";
    if (i % 7 == 3) q += std::string(" and then some more words") + std::string(size_t(40), '!') + " please " + q + q + q;
    json m = json::array();
    if (i % 5 == 0) m.push_back({{"role", "system"}, {"content", "Be brief."}});
    m.push_back({{"role", "user"}, {"content", q}});
    m.push_back({{"role", "assistant"}, {"content", std::to_string(i * 4) + std::string(size_t(i % 4) * 2, '.')}});
    a += json{{"messages", m}}.dump() + "\n";
  }
  for (int i = 0; i < 11; ++i)
    b += json{{"instruction", "Name the number " + std::to_string(i)}, {"input", i % 2 ? "in words" : ""},
              {"output", "number " + std::to_string(i)}}
             .dump() +
         "\n";
  write_bytes(d + "/a.jsonl.gz", gzip_member(a.substr(0, 700)) + gzip_member(a.substr(700)));
  write_bytes(d + "/b.jsonl", b);
  return {d + "/a.jsonl.gz", d + "/b.jsonl"};
}

data::ChatStreamOptions small_opts(int threads, bool train_on_prompt = false) {
  data::ChatStreamOptions o;
  o.threads = threads;
  o.train_on_prompt = train_on_prompt;
  o.batch_conversations = 5;
  o.queue_tokens = 200;  // the reader blocks often
  return o;
}

std::vector<int64_t> flat(const Tensor& t) { return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel()); }

TEST(ChatStream, RowsAreTheWholeDatasetsRowsEpochAfterEpoch) {
  const std::string d = temp_dir("chat_stream_rows");
  const auto files = chat_files(d);
  for (bool prompt : {false, true}) {
    const data::ChatRows whole = data::ChatRows::load(files, encoder(), 64, prompt);
    ASSERT_GT(whole.dropped, 0u);
    ASSERT_GT(whole.rows(), 5u);
    for (int threads : {1, 2}) {
      SCOPED_TRACE("train_on_prompt " + std::to_string(prompt) + ", threads " + std::to_string(threads));
      data::ChatStream s("chat", files, encoder(), 64, small_opts(threads, prompt), quiet);
      std::vector<int64_t> in(64), lab(64), win(64), wlab(64);
      for (uint64_t i = 0; i < whole.rows() * 2 + 3; ++i) {
        s.next_row(in.data(), lab.data());
        whole.fill(i, win.data(), wlab.data());
        ASSERT_EQ(in, win) << "row " << i;
        ASSERT_EQ(lab, wlab) << "row " << i;
        EXPECT_EQ(s.epoch(), i / whole.rows());
        EXPECT_EQ(s.state().rows, i + 1);
      }
    }
  }
  fs::remove_all(d);
}

TEST(ChatStream, GlobalBatchesAndResumeAtAnotherRankCount) {
  const std::string d = temp_dir("chat_stream_ranks");
  const auto files = chat_files(d);
  auto make = [&] { return std::make_unique<data::ChatStream>("chat", files, encoder(), 64, small_opts(1), quiet); };
  // World 1 x local 4 == world 2 x local 2, step after step; at step 3 the two-rank run stops and
  // resumes on four ranks of 1 (from the JSON of its state); the steps cross epoch boundaries.
  auto one = make();
  std::vector<std::unique_ptr<data::ChatStream>> two;
  two.push_back(make()), two.push_back(make());
  std::string saved;
  for (int step = 0; step < 8; ++step) {
    SCOPED_TRACE(step);
    const data::Batch w = one->next_batch(4, 0, 1);
    std::vector<int64_t> all, labels;
    if (step < 3) {
      for (int r = 0; r < 2; ++r) {
        const data::Batch b = two[size_t(r)]->next_batch(2, r, 2);
        auto x = flat(b.inputs), y = flat(b.labels);
        all.insert(all.end(), x.begin(), x.end());
        labels.insert(labels.end(), y.begin(), y.end());
      }
      EXPECT_EQ(two[0]->state().to_json(), two[1]->state().to_json());
      saved = two[0]->state().to_json();
    } else {
      if (step == 3) {
        two.clear();
        data::ChatStreamState st;
        ASSERT_TRUE(data::ChatStreamState::from_json(saved, "test", &st));
        EXPECT_EQ(st.rows, 12u);
        for (int r = 0; r < 4; ++r) two.push_back(make()), two.back()->restore(st);
      }
      for (int r = 0; r < 4; ++r) {
        const data::Batch b = two[size_t(r)]->next_batch(1, r, 4);
        auto x = flat(b.inputs), y = flat(b.labels);
        all.insert(all.end(), x.begin(), x.end());
        labels.insert(labels.end(), y.begin(), y.end());
      }
      EXPECT_EQ(two[0]->state().to_json(), one->state().to_json());
    }
    EXPECT_EQ(all, flat(w.inputs));
    EXPECT_EQ(labels, flat(w.labels));
  }
  EXPECT_GE(one->epoch(), 1u) << "the test should cross an epoch boundary";
  fs::remove_all(d);
}

TEST(ChatStream, BadDataAndMismatchedStatesAreOneLineErrors) {
  const std::string d = temp_dir("chat_stream_bad");
  const auto files = chat_files(d);
  std::vector<int64_t> in(8), lab(8);
  {  // every conversation longer than a row of 9 tokens
    data::ChatStream s("chat", files, encoder(), 8, small_opts(1), quiet);
    EXPECT_ERROR_HAS(s.next_row(in.data(), lab.data()), "chat data: no conversation fits in seq_len + 1 = 9 tokens (34 dropped)");
  }
  write_bytes(d + "/bad.jsonl", json{{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}}.dump() + "\n{\"messages\": 3}\n");
  {
    data::ChatStream s("bad", {d + "/bad.jsonl"}, encoder(), 64, small_opts(1), quiet);
    EXPECT_ERROR_HAS(s.next_row(in.data(), lab.data()), "bad.jsonl:1");
  }
  {
    data::ChatStream s("chat", files, encoder(), 64, small_opts(1), quiet);
    data::ChatStreamState st;
    st.name = "other";
    EXPECT_ERROR_HAS(s.restore(st), "saved on the chat dataset other, this run streams chat");
    data::ChatStreamState parsed;
    EXPECT_FALSE(data::ChatStreamState::from_json("{\"stream\": {}}", "ckpt", &parsed));
    EXPECT_ERROR_HAS(data::ChatStreamState::from_json("{\"chat_stream\": {\"rows\": -1}}", "ckpt", &parsed),
                     "ckpt: chat stream state needs a non-negative");
  }
  fs::remove_all(d);
}

}  // namespace
}  // namespace titan::test
