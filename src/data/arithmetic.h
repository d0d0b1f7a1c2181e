// A generated chat dataset for the supervised fine-tuning demonstration: questions "What is
// 37 + 58?" answered with the number ("95"). Every pair (a, b) with 0 <= a, b <= max_operand is
// shuffled by a seeded Fisher-Yates (splitmix64), the first `valid` pairs held out and the next
// `train` pairs (all the rest when -1) the training split, so the two never share a question and
// the same options always give the same files.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace titan::data {

struct ArithmeticOptions {
  int64_t max_operand = 99;
  int64_t valid = 200;
  int64_t train = -1;  // -1: every pair not held out
  uint64_t seed = 0;
};

struct ArithmeticSplit {
  std::vector<std::pair<int64_t, int64_t>> train, valid;
};

ArithmeticSplit arithmetic_split(const ArithmeticOptions& opt);  // errors on impossible sizes
std::string arithmetic_question(int64_t a, int64_t b);           // "What is a + b?"
std::string arithmetic_answer(int64_t a, int64_t b);             // the sum in decimal
// One JSON line: {"messages": [{"role": "user", ...}, {"role": "assistant", ...}]}.
std::string arithmetic_jsonl_line(int64_t a, int64_t b);
// Writes <dir>/train.jsonl and <dir>/valid.jsonl (the folder is created, each file atomically).
// An existing file of either name is overwritten only when it already holds exactly this dataset
// or `replace` is set: anything else may be a user's file.
void write_arithmetic(const std::string& dir, const ArithmeticOptions& opt, bool replace = false);

}  // namespace titan::data
