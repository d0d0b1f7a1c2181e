// Token ids against Hugging Face `tokenizers` goldens (tools/oracle/tokenizer_goldens.py): every
// document of the bundled c4 samples, the adversarial set, a sweep over all Unicode scalar values,
// and decode of arbitrary id slices.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "data_test_util.h"
#include "data/utf8.h"
#include "golden_file.h"

namespace titan::test {
namespace {

std::string ids_diff(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  std::string s = "first difference at index " + std::to_string(i) + " of " + std::to_string(want.size()) + ": got ";
  s += i < got.size() ? std::to_string(got[i]) : "<end>";
  s += " want ";
  s += i < want.size() ? std::to_string(want[i]) : "<end>";
  return s;
}

void check_dataset(const std::string& name) {
  auto goldens = read_goldens(fixture("tokenizer/" + name + ".ttkg"));
  std::ifstream in(std::string(TITAN_SOURCE_DIR) + "/data/c4_sample/" + name + ".jsonl");
  ASSERT_TRUE(in.good());
  std::string line;
  size_t i = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ASSERT_LT(i, goldens.size());
    std::string text = nlohmann::json::parse(line)["text"].get<std::string>();
    auto ids = qwen_tokenizer().encode(text);
    ASSERT_EQ(ids, goldens[i].ids) << name << " document " << i << ": " << ids_diff(ids, goldens[i].ids);
    // decode(encode(x)) == x holds for text already in NFC (all of these documents are).
    if (data::nfc(text) == text) {
      EXPECT_EQ(qwen_tokenizer().decode(ids), text) << name << " document " << i;
    }
    ++i;
  }
  EXPECT_EQ(i, goldens.size());
}

TEST(TokenizerGolden, C4Train1000) { check_dataset("c4_en_train_first1000"); }
TEST(TokenizerGolden, C4Demo300) { check_dataset("c4_demo_300"); }

TEST(TokenizerGolden, Adversarial) {
  auto goldens = read_goldens(fixture("tokenizer/adversarial.ttkg"));
  ASSERT_GE(goldens.size(), 30u);
  for (auto& g : goldens) {
    std::string text = g.text();
    auto ids = qwen_tokenizer().encode(text);
    EXPECT_EQ(ids, g.ids) << g.name << ": " << ids_diff(ids, g.ids);
    // Round trip: decode gives back the text as `tokenizers` saw it (invalid bytes replaced, NFC).
    std::string seen = data::nfc(data::utf8_replace_invalid(text));
    EXPECT_EQ(qwen_tokenizer().decode(ids), seen) << g.name;
    if (data::is_valid_utf8(text) && seen == text) {
      EXPECT_EQ(qwen_tokenizer().decode(ids), text) << g.name;
    }
  }
}

// Must match sweep_text() in tools/oracle/tokenizer_goldens.py.
std::string sweep_text(uint32_t start, uint32_t end) {
  std::string s;
  for (uint32_t cp = start; cp < end; ++cp) {
    if ((cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0x1D2C0 && cp < 0x1D2D4)) continue;
    s += ' ';
    data::utf8_append(s, cp);
    s += 'a';
    data::utf8_append(s, cp);
    s += '1';
    data::utf8_append(s, cp);
    s += '\n';
  }
  return s;
}

TEST(TokenizerGolden, AllCodePointsSweep) {
  auto goldens = read_goldens(fixture("tokenizer/sweep.ttkg"));
  ASSERT_EQ(goldens.size(), 10u);
  for (auto& g : goldens) {
    unsigned start = 0, end = 0;
    ASSERT_EQ(std::sscanf(g.name.c_str(), "sweep:%u:%u", &start, &end), 2) << g.name;
    auto ids = qwen_tokenizer().encode(sweep_text(start, end));
    EXPECT_EQ(ids.size(), g.count) << g.name;
    EXPECT_EQ(fnv1a_ids(ids), g.hash) << g.name;
  }
}

TEST(TokenizerGolden, Decode) {
  auto goldens = read_goldens(fixture("tokenizer/decode.ttkg"));
  ASSERT_EQ(goldens.size(), 300u);
  for (auto& g : goldens) EXPECT_EQ(qwen_tokenizer().decode(g.ids), g.unit) << g.name;
}

}  // namespace
}  // namespace titan::test
