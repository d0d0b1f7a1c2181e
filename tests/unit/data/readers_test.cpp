// Data readers under bad input: a folder where a file is expected is named as one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "core/error.h"
#include "data/jsonl.h"
#include "data/token_file.h"

namespace titan::test {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

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

}  // namespace
}  // namespace titan::test
