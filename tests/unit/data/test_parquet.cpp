// The Parquet reader against files pyarrow wrote (tests/fixtures/parquet, made by
// tools/oracle/parquet_fixtures.py, with pyarrow's reading of each in expected.json): text and
// chat columns in PLAIN and dictionary encodings, SNAPPY / GZIP / ZSTD / no compression, data
// pages v1 and v2, nulls, several row groups and pages; then every kind of bad file or row.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "compress_util.h"
#include "data/chat_data.h"
#include "data/dataset.h"
#include "data/doc_reader.h"
#include "data/parquet.h"
#include "data_test_util.h"
#include "util/strings.h"

namespace titan::test {
namespace {

namespace pq = data::parquet;
using json = nlohmann::json;

const json& expected() {
  static const json j = json::parse(read_file(fixture("parquet/expected.json")));
  return j;
}

std::shared_ptr<pq::File> open_fixture(const std::string& name) {
  return std::make_shared<pq::File>(pq::file_source(fixture("parquet/" + name)));
}

TEST(Parquet, ReadsWhatPyarrowWrote) {
  int files = 0;
  for (const auto& [name, want] : expected().items()) {
    if (name == "text_invalid_utf8.parquet") continue;
    SCOPED_TRACE(name);
    ++files;
    const bool chat = name.rfind("chat", 0) == 0;
    auto f = open_fixture(name);
    pq::ColumnRows rows(f, want["column"].get<std::string>(), chat);
    ASSERT_EQ(rows.row_groups(), want["row_groups"].get<size_t>());
    const json& all = want["rows"];
    size_t r = 0;
    for (size_t g = 0; g < rows.row_groups(); ++g) {
      rows.load(g);
      for (int64_t i = 0; i < rows.rows_in(g); ++i, ++r) {
        ASSERT_LT(r, all.size());
        const json& w = all[r];
        std::string why;
        if (!chat) {
          std::string t;
          const bool ok = rows.text(i, &t, &why);
          EXPECT_EQ(ok, !w.is_null()) << "row " << r;
          if (ok) EXPECT_EQ(t, w.get<std::string>()) << "row " << r;
          else EXPECT_EQ(why, "the text is null");
          continue;
        }
        std::vector<data::ChatMessage> m;
        const bool ok = rows.messages(i, &m, &why);
        bool bad_content = false;
        if (w.is_array())
          for (auto& x : w) bad_content |= x["content"].is_null() || x["role"].is_null();
        if (w.is_null() || w.empty()) {
          EXPECT_FALSE(ok);
          EXPECT_EQ(why, "no messages (a null or empty list)");
        } else if (bad_content) {
          EXPECT_FALSE(ok);
          EXPECT_EQ(why, "message 1 has no content");
        } else {
          ASSERT_TRUE(ok) << why;
          ASSERT_EQ(m.size(), w.size());
          for (size_t k = 0; k < m.size(); ++k) {
            EXPECT_EQ(m[k].role, w[k]["role"].get<std::string>());
            EXPECT_EQ(m[k].content, w[k]["content"].get<std::string>());
          }
        }
      }
    }
    EXPECT_EQ(r, all.size());
  }
  EXPECT_EQ(files, 6);
}

std::vector<std::string> doc_texts(const std::string& path, data::DocOptions o, uint64_t seek = 0) {
  auto r = data::open_doc_reader(path, o);
  r->seek_row(seek);
  std::vector<std::string> out;
  data::Document d;
  while (r->next(&d)) out.push_back(d.text);
  return out;
}

TEST(Parquet, DocumentsSeekAndBadRows) {
  const std::string f = fixture("parquet/text_dict_gzip_pages.parquet");
  data::DocOptions skip;
  skip.skip_bad_rows = true;
  std::vector<std::string> want;
  for (auto& v : expected()["text_dict_gzip_pages.parquet"]["rows"])
    if (!v.is_null()) want.push_back(v.get<std::string>());
  EXPECT_EQ(doc_texts(f, skip), want);
  // Seeking to a row (across the row group boundary at 300) continues with that row.
  for (uint64_t s : {0u, 5u, 299u, 300u, 301u, 399u, 400u, 1000u}) {
    SCOPED_TRACE(s);
    std::vector<std::string> tail;
    const auto& rows = expected()["text_dict_gzip_pages.parquet"]["rows"];
    for (size_t i = s; i < rows.size(); ++i)
      if (!rows[i].is_null()) tail.push_back(rows[i].get<std::string>());
    EXPECT_EQ(doc_texts(f, skip, s), tail);
  }
  // The null row without skipping, and invalid UTF-8: errors naming the file, row group and row.
  EXPECT_ERROR_HAS(doc_texts(f, {}), "text_dict_gzip_pages.parquet: row group 0, row 100 (row 100 of the file): the text is null");
  EXPECT_ERROR_HAS(doc_texts(fixture("parquet/text_plain_snappy.parquet"), {}),
                   "text_plain_snappy.parquet: row group 0, row 7 (row 7 of the file): the text is null");
  const std::string u = fixture("parquet/text_invalid_utf8.parquet");
  EXPECT_ERROR_HAS(doc_texts(u, {}), "text_invalid_utf8.parquet: row group 0, row 1 (row 1 of the file): the text is not valid UTF-8");
  EXPECT_EQ(doc_texts(u, skip), (std::vector<std::string>{"fine", "also fine"}));
  // Columns: chosen by name; a missing one or one of another type is an error.
  data::DocOptions col;
  col.field = "id";
  EXPECT_ERROR_HAS(doc_texts(fixture("parquet/text_plain_snappy.parquet"), col),
                   "text_plain_snappy.parquet: column 'id' is of type INT64, not a string column");
  col.field = "body";
  EXPECT_ERROR_HAS(doc_texts(fixture("parquet/text_plain_snappy.parquet"), col),
                   "text_plain_snappy.parquet: no column 'body' (columns: text, id)");
  col.field = "content";
  EXPECT_EQ(doc_texts(fixture("parquet/text_required_none.parquet"), col).size(), 30u);
  EXPECT_ERROR_HAS(doc_texts(fixture("parquet/chat_snappy.parquet"), {}), "chat_snappy.parquet: no column 'text'");
  col.field = "messages";
  EXPECT_ERROR_HAS(doc_texts(fixture("parquet/chat_snappy.parquet"), col),
                   "column 'messages' is a nested column, not a string column");
  data::DocOptions chat;
  chat.chat = true;
  chat.field = "text";
  EXPECT_ERROR_HAS(doc_texts(fixture("parquet/text_plain_snappy.parquet"), chat),
                   "column 'text' is not a list of {role, content} structs");
}

TEST(Parquet, DamagedFilesAreErrorsNamingTheFile) {
  const std::string d = temp_dir("parquet_bad");
  const std::string good = read_file(fixture("parquet/text_dict_zstd_v2.parquet"));
  auto open = [&](const std::string& name, const std::string& bytes) {
    write_bytes(d + "/" + name, bytes);
    data::DocOptions o;
    o.skip_bad_rows = true;  // damage is never skipped
    return doc_texts(d + "/" + name, o);
  };
  EXPECT_ERROR_HAS(open("cut.parquet", good.substr(0, good.size() - 3)), "cut.parquet: truncated Parquet file or footer");
  std::string len = good;
  len[len.size() - 8] = char(0xff), len[len.size() - 7] = char(0xff);
  EXPECT_ERROR_HAS(open("len.parquet", len), "len.parquet: truncated Parquet footer");
  EXPECT_ERROR_HAS(open("tiny.parquet", "PAR1"), "tiny.parquet: not a Parquet file");
  EXPECT_ERROR_HAS(open("csv.parquet", "a,b,c\n1,2,3\nxxxxxxxxxxxxxxxxxxxxx\n"), "csv.parquet: not a Parquet file (no PAR1 magic at its start)");
  // The data cut out from under an intact footer.
  const uint32_t flen = uint32_t(uint8_t(good[good.size() - 8])) | uint32_t(uint8_t(good[good.size() - 7])) << 8;
  const std::string footer = good.substr(good.size() - 8 - flen);
  EXPECT_ERROR_HAS(open("hole.parquet", good.substr(0, 200) + footer), "hole.parquet: row group 0, column 'text'");
  // Every byte of the footer changed in turn: an error or a file that reads, never a crash.
  int errors = 0;
  for (size_t i = good.size() - 8 - flen; i < good.size() - 8; ++i) {
    std::string b = good;
    b[i] = char(b[i] ^ 0x41);
    write_bytes(d + "/flip.parquet", b);
    errors += !error_of([&] { doc_texts(d + "/flip.parquet", {}); }).empty();
  }
  EXPECT_GT(errors, 0);
  // Page bytes changed: the codec or the decoder notices.
  std::string page = read_file(fixture("parquet/text_dict_gzip_pages.parquet"));  // one column
  for (size_t i = 40; i < 80; ++i) page[i] = char(page[i] ^ 0x33);
  EXPECT_ERROR_HAS(open("page.parquet", page), "page.parquet: row group 0, column 'text'");
  std::filesystem::remove_all(d);
}

TEST(Parquet, DatasetsAndChatRowsReadParquet) {
  // A Parquet text dataset gives the tokens of the same texts as JSON lines.
  const std::string d = temp_dir("parquet_ds");
  std::string jl;
  for (auto& v : expected()["text_dict_zstd_v2.parquet"]["rows"]) jl += json{{"text", v}}.dump() + "\n";
  write_bytes(d + "/same.jsonl", jl);
  data::DatasetSpec spec;
  spec.cache_dir = "none";
  spec.progress = false;
  auto quiet = [](const std::string&) {};
  spec.name_or_path = fixture("parquet/text_dict_zstd_v2.parquet");
  auto a = data::TokenDataset::load(spec, qwen_tokenizer(), quiet);
  spec.name_or_path = d + "/same.jsonl";
  auto b = data::TokenDataset::load(spec, qwen_tokenizer(), quiet);
  ASSERT_EQ(a->size(), b->size());
  std::vector<int64_t> ta(a->size()), tb(b->size());
  a->read(0, ta.size(), ta.data());
  b->read(0, tb.size(), tb.data());
  EXPECT_EQ(ta, tb);
  EXPECT_EQ(a->documents(), 60u);
  // Chat rows from Parquet: the three bad conversations (empty, null, a null content) fail or
  // are skipped and counted.
  data::ChatEncoder enc(data::ChatTemplate::load(std::string(TITAN_SOURCE_DIR) + "/assets/qwen3-tokenizer"),
                        qwen_tokenizer());
  const std::string c = fixture("parquet/chat_snappy.parquet");
  EXPECT_ERROR_HAS(data::ChatRows::load({c}, enc, 128, false),
                   "chat_snappy.parquet: row group 0, row 2 (row 2 of the file): no messages");
  data::DocOptions o;
  o.skip_bad_rows = true;
  auto rows = data::ChatRows::load({c}, enc, 128, false, o);
  EXPECT_EQ(rows.conversations, 3u);
  EXPECT_EQ(rows.skipped, 3u);
  // The same conversation as a JSON line encodes to the same ids.
  write_bytes(d + "/chat.jsonl",
              "{\"messages\": [{\"role\": \"user\", \"content\": \"What is 2+2?\"}, {\"role\": \"assistant\", "
              "\"content\": \"4\"}]}\n");
  auto one = data::ChatRows::load({d + "/chat.jsonl"}, enc, 128, false);
  std::vector<int64_t> in1(128), lab1(128), in2(128), lab2(128);
  one.fill(0, in1.data(), lab1.data());
  rows.fill(0, in2.data(), lab2.data());
  const size_t n = size_t(std::find(in1.begin(), in1.end(), 151643) - in1.begin());
  ASSERT_LT(n, 128u);
  EXPECT_TRUE(std::equal(in1.begin(), in1.begin() + std::ptrdiff_t(n), in2.begin()));
  std::filesystem::remove_all(d);
}

}  // namespace
}  // namespace titan::test
