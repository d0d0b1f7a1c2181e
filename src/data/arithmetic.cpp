#include "data/arithmetic.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "util/strings.h"

namespace titan::data {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string lines_of(const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  std::string text;
  for (const auto& [a, b] : pairs) text += arithmetic_jsonl_line(a, b) + "\n";
  return text;
}

}  // namespace

ArithmeticSplit arithmetic_split(const ArithmeticOptions& opt) {
  TITAN_CHECK(opt.max_operand >= 0 && opt.max_operand <= 9999, "arithmetic: --max-operand must be in [0, 9999]");
  const int64_t n = (opt.max_operand + 1) * (opt.max_operand + 1);
  TITAN_CHECK(opt.valid >= 0 && opt.valid < n, "arithmetic: --valid must be in [0, ", n - 1, "] (", n,
              " questions exist)");
  TITAN_CHECK(opt.train == -1 || (opt.train >= 1 && opt.train <= n - opt.valid), "arithmetic: --train must be -1 or in [1, ",
              n - opt.valid, "]");
  std::vector<std::pair<int64_t, int64_t>> all;
  all.reserve(size_t(n));
  for (int64_t a = 0; a <= opt.max_operand; ++a)
    for (int64_t b = 0; b <= opt.max_operand; ++b) all.emplace_back(a, b);
  uint64_t state = opt.seed;
  for (int64_t i = n - 1; i > 0; --i) std::swap(all[size_t(i)], all[size_t(splitmix64(state) % uint64_t(i + 1))]);
  ArithmeticSplit s;
  s.valid.assign(all.begin(), all.begin() + opt.valid);
  const int64_t ntrain = opt.train == -1 ? n - opt.valid : opt.train;
  s.train.assign(all.begin() + opt.valid, all.begin() + opt.valid + ntrain);
  return s;
}

std::string arithmetic_question(int64_t a, int64_t b) {
  return "What is " + std::to_string(a) + " + " + std::to_string(b) + "?";
}
std::string arithmetic_answer(int64_t a, int64_t b) { return std::to_string(a + b); }

std::string arithmetic_jsonl_line(int64_t a, int64_t b) {
  const nlohmann::json j = {{"messages",
                             {{{"role", "user"}, {"content", arithmetic_question(a, b)}},
                              {{"role", "assistant"}, {"content", arithmetic_answer(a, b)}}}}};
  return j.dump();
}

void write_arithmetic(const std::string& dir, const ArithmeticOptions& opt, bool replace) {
  const ArithmeticSplit s = arithmetic_split(opt);
  const std::pair<std::string, std::string> files[] = {{dir + "/train.jsonl", lines_of(s.train)},
                                                        {dir + "/valid.jsonl", lines_of(s.valid)}};
  // A file of that name that holds anything else may be a user's: refused unless replace.
  for (const auto& [path, text] : files) {
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) continue;
    TITAN_CHECK(replace || read_file(path) == text, path,
                ": exists and is not this dataset (other options, or not written by make-arithmetic); pass --replace "
                "to overwrite it, or choose another folder");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TITAN_CHECK(!ec, dir, ": cannot create folder: ", ec.message());
  for (const auto& [path, text] : files) write_file_atomic(path, text);
}

}  // namespace titan::data
