// UTF-8 repair and NFC, the BPE merge algorithms, and tokenizer.json loading on small hand-made
// tokenizers (both merge spellings, and each rejected input).
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "data_test_util.h"
#include "core/error.h"
#include "data/bpe.h"
#include "data/dataset.h"
#include "util/strings.h"
#include "data/utf8.h"

namespace titan::test {
namespace {

using data::utf8_replace_invalid;
const std::string R = "\xEF\xBF\xBD";  // U+FFFD

TEST(Utf8, ReplacesMaximalSubparts) {
  // Expected values are what Python's bytes.decode("utf-8", "replace") returns.
  EXPECT_EQ(utf8_replace_invalid("abc"), "abc");
  EXPECT_EQ(utf8_replace_invalid("\xff"), R);
  EXPECT_EQ(utf8_replace_invalid("\xe2\x82"), R);                   // truncated 3-byte sequence: one
  EXPECT_EQ(utf8_replace_invalid("\xe2\x82x"), R + "x");
  EXPECT_EQ(utf8_replace_invalid("\xed\xa0\x80"), R + R + R);       // surrogate: ED then two strays
  EXPECT_EQ(utf8_replace_invalid("\xc0\xaf"), R + R);               // overlong lead C0 is never valid
  EXPECT_EQ(utf8_replace_invalid("\xf0\x9f\x98"), R);
  EXPECT_EQ(utf8_replace_invalid("\xf4\x90\x80\x80"), R + R + R + R);  // above U+10FFFF
  EXPECT_EQ(utf8_replace_invalid("\xe0\x80\xaf"), R + R + R);
  EXPECT_EQ(utf8_replace_invalid("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");
  EXPECT_TRUE(data::is_valid_utf8("\xf0\x9f\x98\x80 \xc3\xa9"));
  EXPECT_FALSE(data::is_valid_utf8("\xc3"));
}

TEST(Utf8, Nfc) {
  EXPECT_EQ(data::nfc("e\xcc\x81"), "\xc3\xa9");           // e + U+0301 -> U+00E9
  EXPECT_EQ(data::nfc("\xe2\x84\xab"), "\xc3\x85");        // U+212B ANGSTROM SIGN -> U+00C5
  EXPECT_EQ(data::nfc(std::string("a\0b", 3)), std::string("a\0b", 3));  // NUL kept
}

// A small byte-level BPE: all 256 bytes plus merges built from random words.
struct ToyBpe {
  data::BpeModel m;
  ToyBpe(uint32_t seed, int n_merges) {
    std::vector<std::pair<std::string, uint32_t>> vocab;
    for (int b = 0; b < 256; ++b) vocab.emplace_back(std::string(1, char(b)), uint32_t(b));
    std::mt19937 rng(seed);
    std::vector<std::string> toks;
    for (int b = 'a'; b <= 'e'; ++b) toks.push_back(std::string(1, char(b)));
    std::vector<std::pair<std::string, std::string>> merges;
    std::set<std::string> seen(toks.begin(), toks.end());
    while (int(merges.size()) < n_merges) {
      std::string a = toks[rng() % toks.size()], b = toks[rng() % toks.size()];
      if (seen.count(a + b)) continue;
      seen.insert(a + b);
      merges.emplace_back(a, b);
      toks.push_back(a + b);
      vocab.emplace_back(a + b, uint32_t(vocab.size()));
    }
    m.build(vocab, merges, "toy");
  }
};

TEST(Bpe, ScanAndHeapAgree) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    ToyBpe t(seed, 60);
    std::mt19937 rng(seed * 7);
    for (int k = 0; k < 400; ++k) {
      std::string w;
      size_t len = 1 + rng() % 90;
      for (size_t i = 0; i < len; ++i) w += char('a' + rng() % 5);
      std::vector<uint32_t> a, b, c;
      t.m.encode_word_scan(w, a);
      t.m.encode_word_heap(w, b);
      t.m.encode_word(w, c);
      ASSERT_EQ(a, b) << w;
      ASSERT_EQ(a, c) << w;
      std::string back;
      for (uint32_t id : a) back += t.m.token_bytes(id);
      ASSERT_EQ(back, w);
    }
  }
}

TEST(Bpe, LowestRankFirstLeftmostOnTies) {
  // merges: (b,c) rank 0, (a,b) rank 1: "abc" -> a + bc, not ab + c.
  data::BpeModel m;
  std::vector<std::pair<std::string, uint32_t>> vocab;
  for (int b = 0; b < 256; ++b) vocab.emplace_back(std::string(1, char(b)), uint32_t(b));
  vocab.emplace_back("bc", 256);
  vocab.emplace_back("ab", 257);
  vocab.emplace_back("aa", 258);
  m.build(vocab, {{"b", "c"}, {"a", "b"}, {"a", "a"}}, "t");
  std::vector<uint32_t> ids;
  m.encode_word("abc", ids);
  EXPECT_EQ(ids, (std::vector<uint32_t>{'a', 256}));
  ids.clear();
  m.encode_word("aaa", ids);  // leftmost pair merges first
  EXPECT_EQ(ids, (std::vector<uint32_t>{258, 'a'}));
}

// tokenizer.json text for a toy byte-level tokenizer; `merges` is spliced in verbatim.
std::string toy_json(const std::string& merges, const std::string& normalizer = "{\"type\":\"NFC\"}",
                     const std::string& extra_vocab = ",\"ab\":256") {
  std::string vocab;
  // The 256 byte-level characters (GPT-2 mapping) as vocabulary entries 0..255.
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    uint32_t cp = printable ? uint32_t(b) : next++;
    std::string ch;
    data::utf8_append(ch, cp);
    if (ch == "\"" || ch == "\\") ch = "\\" + ch;
    vocab += (b ? "," : "") + std::string("\"") + ch + "\":" + std::to_string(b);
  }
  return R"({"version":"1.0","added_tokens":[{"id":257,"content":"<|endoftext|>","special":true,"normalized":false}],
    "normalizer":)" + normalizer + R"(,
    "pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\s+|\\S+"},"behavior":"Isolated","invert":false},
      {"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]},
    "post_processor":null,"decoder":{"type":"ByteLevel"},
    "model":{"type":"BPE","dropout":null,"unk_token":null,"byte_fallback":false,"vocab":{)" +
         vocab + extra_vocab + R"(},"merges":)" + merges + "}}";
}

TEST(TokenizerLoad, MergeSpellingsAgree) {
  auto a = data::Tokenizer::from_json(toy_json(R"(["a b"])"), "strings");
  auto b = data::Tokenizer::from_json(toy_json(R"([["a","b"]])"), "pairs");
  EXPECT_EQ(a.encode("abab<|endoftext|>xab"), (std::vector<uint32_t>{256, 256, 257, 'x', 256}));
  EXPECT_EQ(a.encode("abab ab"), b.encode("abab ab"));
  EXPECT_EQ(a.decode(a.encode("abab<|endoftext|>x")), "abab<|endoftext|>x");
  EXPECT_EQ(a.decode(a.encode("abab<|endoftext|>x"), /*skip_special_tokens=*/true), "ababx");
  EXPECT_EQ(a.vocab_size(), 258u);
  EXPECT_EQ(a.eot_id(), 257u);
}

void expect_error(const std::string& json, const std::string& needle) {
  try {
    data::Tokenizer::from_json(json, "bad.json");
    FAIL() << "no error; wanted " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
  }
}

// A vocabulary without a token for some byte (SmolLM2's lacks a few control bytes): that byte is
// dropped before merging, as tokenizers' BPE does without an unk_token, so its neighbours merge.
TEST(TokenizerLoad, BytesWithoutATokenAreDropped) {
  std::string j = toy_json(R"(["a b"])", "null", ",\"ab\":256");
  j.replace(j.find("\"c\":99,"), 7, "");
  auto tok = data::Tokenizer::from_json(j, "toy.json");
  EXPECT_EQ(tok.encode("acb"), (std::vector<uint32_t>{256}));
  EXPECT_EQ(tok.encode("c"), (std::vector<uint32_t>{}));
  EXPECT_EQ(tok.encode("dc"), (std::vector<uint32_t>{100}));
}

TEST(TokenizerLoad, RejectsBadFiles) {
  expect_error("{not json", "not valid JSON");
  expect_error(toy_json(R"(["a c"])"), "merge 0 uses a token missing");
  expect_error(toy_json(R"(["abc"])"), "not two tokens");
  expect_error(toy_json(R"([["a"]])"), "neither");
  expect_error(toy_json(R"(["a b"])", R"({"type":"Lowercase"})"), "normalizer type 'Lowercase'");
  expect_error(toy_json(R"(["a b"])", "null", ",\"ab\":256,\"zz\":256"), "appears twice");
  // Table shapes, checked by the streaming parser of model.vocab / model.merges.
  std::string good = toy_json(R"(["a b"])");
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  expect_error(with("\"merges\":[\"a b\"]", "\"merges\":{}"), "model.merges must be an array");
  expect_error(with("\"merges\":[\"a b\"]", "\"merges\":[[\"a\",1]]"), "merge 0 is neither");
  expect_error(with("\"merges\":[\"a b\"]", "\"merges\":[[\"a\",\"b\",\"c\"]]"), "merge 0 is neither");
  expect_error(with("\"merges\":[\"a b\"]", "\"merges\":[\"a b\",[[\"a\"]]]"), "merge 1 is neither");
  expect_error(with("\"merges\":[\"a b\"]", "\"merges2\":[]"), "model.merges is missing");
  expect_error(with("\"ab\":256", "\"ab\":-1"), "vocab entry 'ab' has no non-negative id");
  expect_error(with("\"ab\":256", "\"ab\":\"x\""), "vocab entry 'ab' has no non-negative id");
  expect_error(with("\"vocab\":{", "\"vocab\":[],\"v\":{"), "model.vocab must be an object");
  expect_error(good.substr(0, good.size() - 3), "not valid JSON");
  EXPECT_THROW(data::Tokenizer::load("/nonexistent/dir"), Error);
}

TEST(TokenizerMisc, LongTextAndBatchesMatchSingleEncode) {
  const auto& tok = qwen_tokenizer();
  // About 2.2 MB of real text with many newlines: cut points exist and get used.
  std::string big = read_file(std::string(TITAN_SOURCE_DIR) + "/data/c4_sample/c4_en_train_first1000.jsonl");
  EXPECT_TRUE(tok.splits_after_newline());
  EXPECT_EQ(data::encode_long_text(tok, big, 2), tok.encode(big));
  std::vector<std::string> texts = {"", "a", "Hello world", big.substr(0, 5000), "<|im_start|>x"};
  auto batch = tok.encode_batch(texts, 2);
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], tok.encode(texts[i]));
  EXPECT_EQ(tok.eot_id(), 151643u);
  EXPECT_EQ(tok.vocab_size(), 151669u);
  EXPECT_THROW(tok.decode({200000}), Error);
}

}  // namespace
}  // namespace titan::test

namespace titan::test {
namespace {

// The fuzz seed tokenizer.json (merges in both spellings, an added token) loads and encodes.
TEST(TokenizerLoad, FuzzSeedToyTokenizer) {
  auto tok = data::Tokenizer::load(std::string(TITAN_SOURCE_DIR) + "/tests/fuzz/corpus/fuzz_tokenizer_json/toy.json");
  EXPECT_EQ(tok.encode("ab the<|endoftext|>"), (std::vector<uint32_t>{256, 257, 258, 259}));
  EXPECT_EQ(tok.decode({256, 257, 258, 259}), "ab the<|endoftext|>");
}

}  // namespace
}  // namespace titan::test
