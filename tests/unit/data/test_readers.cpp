// Data readers under bad input: a folder where a file is expected is named as one, and the
// bad-line hint names an option that exists.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <sstream>
#include <string>

#include "common/test_util.h"
#include "core/error.h"
#include "data/jsonl.h"
#include "data/token_file.h"

namespace titan::test {
namespace {

namespace fs = std::filesystem;

TEST(DataReaders, RefuseFolders) {
  const fs::path d = fs::temp_directory_path() / ("titan_readers_test_" + std::to_string(::getpid()));
  fs::create_directories(d / "x.bin");
  const std::string dir = (d / "x.bin").string();
  EXPECT_NE(error_of([&] { data::TokenFile::open(dir); }).find("x.bin: is a directory"), std::string::npos);
  EXPECT_NE(error_of([&] { data::read_jsonl_file(dir, {}, [](std::string&&) {}, nullptr); })
                .find("x.bin: is a directory"),
            std::string::npos);
  fs::remove_all(d);
}

TEST(Jsonl, BadLineHintNamesAnOptionThatExists) {
  std::istringstream in("{\"text\": \"a\"}\n{oops\n");
  const std::string msg = error_of([&] { data::read_jsonl(in, "f.jsonl", {}, [](std::string&&) {}, nullptr); });
  EXPECT_NE(msg.find("f.jsonl:2: malformed JSON"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("--data.skip_bad_lines"), std::string::npos) << msg;  // no such job option
  EXPECT_NE(msg.find("titan tokenize --skip-bad-lines"), std::string::npos) << msg;
  // The command that has the option says just that.
  std::istringstream in2("{oops\n");
  data::JsonlOptions o;
  o.bad_line_hint = "pass --skip-bad-lines to skip such lines";
  const std::string msg2 = error_of([&] { data::read_jsonl(in2, "g.jsonl", o, [](std::string&&) {}, nullptr); });
  EXPECT_NE(msg2.find("g.jsonl:1: malformed JSON"), std::string::npos) << msg2;
  EXPECT_NE(msg2.find("(pass --skip-bad-lines to skip such lines)"), std::string::npos) << msg2;
}

}  // namespace
}  // namespace titan::test
