// Streaming detokenization, stop rules and left-padding bookkeeping.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/byte_level.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "infer/batch.h"
#include "infer/stopping.h"
#include "infer/stream.h"

using namespace titan;
using namespace titan::infer;

TEST(Stream, HoldsBackIncompleteCharactersOnly) {
  Utf8Stream s;
  const std::string euro = "\xE2\x82\xAC";  // U+20AC
  EXPECT_EQ(s.push("a" + euro.substr(0, 1)), "a");
  EXPECT_EQ(s.push(euro.substr(1, 1)), "");
  EXPECT_EQ(s.push(euro.substr(2) + "b"), euro + "b");
  // Ill-formed bytes are replaced at once, as decode() does: a stray continuation byte, an invalid
  // lead byte at the end, a lead byte followed by a non-continuation.
  EXPECT_EQ(s.push("\x80"), "\xEF\xBF\xBD");
  EXPECT_EQ(s.push("\xFF"), "\xEF\xBF\xBD");
  EXPECT_EQ(s.push("\xE2" "c"), "\xEF\xBF\xBD" "c");
  // An unfinished character at the end is repaired on flush.
  EXPECT_EQ(s.push("\xF0\x9F\x98"), "");
  EXPECT_EQ(s.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(s.flush(), "");
}

TEST(Stream, PiecesOfTokensConcatenateToDecode) {
  const data::Tokenizer tok = data::Tokenizer::load(std::string(TITAN_SOURCE_DIR) + "/assets/qwen3-tokenizer");
  std::vector<uint32_t> ids = tok.encode("naïve 日本語 👩‍👩‍👧 <|im_end|> done ");
  // Single-byte tokens that split characters: U+1F600 byte by byte, then a stray lead byte.
  auto byte_token = [&](unsigned char b) {
    std::string cp;
    data::utf8_append(cp, data::byte_level_map().byte_to_cp[b]);
    int64_t id = tok.token_to_id(cp);
    EXPECT_GE(id, 0);
    return uint32_t(id);
  };
  for (unsigned char b : std::string("\xF0\x9F\x98\x80")) ids.push_back(byte_token(b));
  ids.push_back(byte_token(0xE2));
  ids.push_back(tok.encode("x")[0]);
  ids.push_back(byte_token(0xE2));
  TokenStream ts(tok);
  std::string streamed;
  size_t empty_pieces = 0;
  for (uint32_t id : ids) {
    std::string piece = ts.push(id);
    empty_pieces += piece.empty();
    streamed += piece;
  }
  streamed += ts.flush();
  EXPECT_EQ(streamed, tok.decode(ids, /*skip_special_tokens=*/true));
  EXPECT_EQ(streamed.find("<|im_end|>"), std::string::npos);
  EXPECT_NE(streamed.find("\xF0\x9F\x98\x80"), std::string::npos);
  EXPECT_GE(empty_pieces, 3u);  // the emoji's first three bytes and the special token give no text
}

TEST(Stop, EosStopStringsAcrossTokensAndLength) {
  StopParams p;
  p.eos_ids = {9};
  p.stop_strings = {"END", "x"};
  p.max_new_tokens = 10;
  StopChecker c(p);
  EXPECT_EQ(c.update(1, "abc E", 1), FinishReason::None);
  EXPECT_EQ(c.update(2, "N", 2), FinishReason::None);
  EXPECT_EQ(c.update(3, "Dless", 3), FinishReason::Stop);  // "END" completed with overhang
  StopChecker d(p);
  EXPECT_EQ(d.update(9, "", 1), FinishReason::Eos);
  StopChecker e(p);
  for (int k = 1; k < 10; ++k) EXPECT_EQ(e.update(1, "ab", k), FinishReason::None);
  EXPECT_EQ(e.update(1, "ab", 10), FinishReason::Length);
  StopChecker f(p);
  EXPECT_EQ(f.update(4, "yyx", 1), FinishReason::Stop);
  p.stop_strings = {""};
  EXPECT_THROW(validate(p), Error);
}

TEST(Batch, LeftPaddingMaskAndPositionsAsTransformers) {
  LeftPaddedBatch b = LeftPaddedBatch::make({{5, 6, 7}, {8}}, 0);
  EXPECT_EQ(b.width, 3);
  EXPECT_EQ(b.ids, (std::vector<uint32_t>{5, 6, 7, 0, 0, 8}));
  EXPECT_EQ(b.mask, (std::vector<uint8_t>{1, 1, 1, 0, 0, 1}));
  EXPECT_EQ(b.positions, (std::vector<int64_t>{0, 1, 2, 1, 1, 0}));  // cumsum(mask) - 1, pad = 1
  b.append({11, 12}, {true, false});
  EXPECT_EQ(b.width, 4);
  EXPECT_EQ(b.row(0), (std::vector<uint32_t>{5, 6, 7, 11}));
  EXPECT_EQ(b.row(1), (std::vector<uint32_t>{8, 0}));  // finished: pad appended
  EXPECT_EQ(b.positions[3], 3);
  EXPECT_EQ(b.positions[7], 1);
  EXPECT_EQ(b.mask[7], 1);
  EXPECT_THROW(LeftPaddedBatch::make({{1}, {}}, 0), Error);
}
