// Token-id text files (the input of `titan score --tokens`): every byte of a line is either part of
// an id or a separator; anything else is an error naming the file, the line and the reason.
#include <gtest/gtest.h>

#include <string>

#include "io_test_util.h"
#include "io/token_lines.h"

namespace titan::iotest {
namespace {

TEST(TokenLines, ParsesEqualLengthSequences) {
  Tensor t = parse_token_lines("1 2 3\n\n 4\t5 6 \r\n", "ids.txt");
  ASSERT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.data<int64_t>()[3], 4);
  EXPECT_EQ(t.data<int64_t>()[5], 6);
}

TEST(TokenLines, NulByteIsAnErrorNotTheEndOfTheLine) {
  // Before: the line was read up to the NUL, "1 2" scored and "9 9" silently dropped.
  const std::string text = std::string("1 2\0 9 9\n3 4\n", 13);
  const std::string msg = error_of([&] { parse_token_lines(text, "ids.txt"); });
  EXPECT_NE(msg.find("ids.txt:1: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("NUL"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { parse_token_lines(std::string("5 6\n7 8\0", 8), "ids.txt"); }).find("ids.txt:2: "),
            std::string::npos);
}

TEST(TokenLines, OtherBadBytesAndNumbers) {
  EXPECT_NE(error_of([] { parse_token_lines("1 2\n3 x\n", "f"); }).find("f:2: "), std::string::npos);
  EXPECT_NE(error_of([] { parse_token_lines("1 -2\n", "f"); }).find("f:1: "), std::string::npos);
  EXPECT_NE(error_of([] { parse_token_lines("1 +2\n", "f"); }).find("f:1: "), std::string::npos);
  EXPECT_NE(error_of([] { parse_token_lines("1 99999999999999999999\n", "f"); }).find("f:1: "), std::string::npos);
  EXPECT_NE(error_of([] { parse_token_lines("1 2\n3\n", "f"); }).find("f:2: sequence has 1 tokens, expected 2"),
            std::string::npos);
  const std::string msg = error_of([] { parse_token_lines("1 2\x01\n", "f"); });
  EXPECT_NE(msg.find("f:1: "), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\x01'), std::string::npos) << "the bad byte is shown escaped: " << msg;
}

TEST(TokenLines, RefusesAFolder) {
  TempDir d;
  EXPECT_NE(error_of([&] { read_token_lines(d.path); }).find(": is a directory"), std::string::npos);
}

}  // namespace
}  // namespace titan::iotest
