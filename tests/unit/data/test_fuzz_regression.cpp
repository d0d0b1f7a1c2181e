// Replays the data fuzz targets' seed corpora and saved crash inputs (tests/fuzz/corpus/<target>/
// and tests/fuzz/regressions/<target>/) through the same harness bodies as the fuzzers, so a
// fixed crash stays fixed without libFuzzer.
#include <gtest/gtest.h>

#include <filesystem>

#include "fuzz/data_harness.h"
#include "util/strings.h"

namespace titan::test {
namespace {

namespace fs = std::filesystem;

int replay(const std::string& target, void (*body)(std::string_view)) {
  int n = 0;
  for (const char* kind : {"corpus", "regressions"}) {
    fs::path dir = fs::path(TITAN_SOURCE_DIR) / "tests" / "fuzz" / kind / target;
    if (!fs::is_directory(dir)) continue;
    for (auto& e : fs::directory_iterator(dir)) {
      if (!e.is_regular_file()) continue;
      SCOPED_TRACE(e.path().string());
      body(read_file(e.path().string()));
      ++n;
    }
  }
  return n;
}

TEST(FuzzRegression, Tokenizer) { EXPECT_GE(replay("fuzz_tokenizer", fuzz::tokenizer_round_trip), 2); }
TEST(FuzzRegression, TokenizerJson) { EXPECT_GE(replay("fuzz_tokenizer_json", fuzz::tokenizer_json), 1); }
TEST(FuzzRegression, Jsonl) { EXPECT_GE(replay("fuzz_jsonl", fuzz::jsonl), 1); }
TEST(FuzzRegression, Parquet) { EXPECT_GE(replay("fuzz_parquet", fuzz::parquet), 3); }
TEST(FuzzRegression, TokenLines) { EXPECT_GE(replay("fuzz_token_lines", fuzz::token_lines), 2); }

}  // namespace
}  // namespace titan::test
