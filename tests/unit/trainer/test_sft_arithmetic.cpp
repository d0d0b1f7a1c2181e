// The supervised fine-tuning demonstration (recipes/sft_arithmetic.toml): a generated chat dataset
// of "What is a + b?" questions, trained with the loss on the assistant's answers only, packed
// block-causal, with validation; then greedy answers to the held-out questions, scored by exact
// match of the number after the template's empty think block.
//
// It runs the recipe's whole schedule and asserts the targets: the validation loss falls
// and at least 90% of the 200 held-out questions are answered exactly (see the recipe's header
// for the measured curve and time). TITAN_SFT_ARGS="--section.key value ..." overrides recipe keys
// (for tuning; the assertions stay).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "data/arithmetic.h"
#include "data/chat_template.h"
#include "comm/comm.h"
#include "infer/generate.h"
#include "infer/cached_source.h"
#include "train/trainer.h"
#include "util/strings.h"

using namespace titan;
namespace fs = std::filesystem;

namespace {

// The answer in a generated text: what follows Qwen3's think block, trimmed.
std::string answer_of(std::string text) {
  const std::string think_end = "</think>";
  if (const size_t p = text.find(think_end); p != std::string::npos) text = text.substr(p + think_end.size());
  const size_t a = text.find_first_not_of(" \n"), b = text.find_last_not_of(" \n");
  return a == std::string::npos ? "" : text.substr(a, b - a + 1);
}

}  // namespace

TEST(SftArithmetic, ValidationLossFallsAndNinetyPercentOfHeldOutAnswersAreExact) {
  const std::string src = TITAN_SOURCE_DIR;
  const fs::path work = fs::temp_directory_path() / ("titan_sft_test_" + std::to_string(::getpid()));
  fs::remove_all(work);
  data::ArithmeticOptions ao;  // the recipe's data: operands 0..99, 200 held out
  data::write_arithmetic((work / "data").string(), ao);

  JobConfig cfg = load_job_config_file(src + "/recipes/sft_arithmetic.toml");
  if (const char* extra = std::getenv("TITAN_SFT_ARGS")) {  // "--section.key value ..." (experiments)
    std::vector<std::string> words;
    for (auto& w : split(extra, ' ')) if (!w.empty()) words.push_back(w);
    ASSERT_EQ(words.size() % 2, 0u) << "TITAN_SFT_ARGS: expected --section.key value pairs";
    for (size_t i = 0; i < words.size(); i += 2) {
      ASSERT_EQ(words[i].rfind("--", 0), 0u) << "TITAN_SFT_ARGS: " << words[i] << " is not --section.key";
      apply_override(cfg, words[i].substr(2), words[i + 1]);
    }
  }
  cfg.job.dump_folder = (work / "run").string();
  if (cfg.model.hf_assets_path == "assets/qwen3-tokenizer") cfg.model.hf_assets_path = src + "/assets/qwen3-tokenizer";
  cfg.training.dataset_path = (work / "data" / "train.jsonl").string();
  cfg.validation.dataset_path = (work / "data" / "valid.jsonl").string();
  cfg.checkpoint.enable = false;
  cfg.checkpoint.last_save_in_hf = false;
  cfg.metrics.enable_tensorboard = false;
  cfg.validation.sample_prompts.clear();

  comm::LocalComm comm;
  Trainer trainer(cfg, comm);
  trainer.train();

  // The validation curve, from metrics.jsonl.
  std::vector<double> vloss;
  std::ifstream in(work / "run" / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("validation_loss")) vloss.push_back(j["validation_loss"].get<double>());
  }
  ASSERT_GE(vloss.size(), 2u);
  std::printf("validation loss:");
  for (double v : vloss) std::printf(" %.4f", v);
  std::printf("\n");
  EXPECT_LT(vloss.back(), vloss.front());

  // Greedy answers to the held-out questions.
  const data::ArithmeticSplit split = data::arithmetic_split(ao);
  const data::Tokenizer& tok = trainer.data().tokenizer();
  const data::ChatTemplate tmpl = data::ChatTemplate::load(cfg.model.hf_assets_path);
  std::vector<std::vector<uint32_t>> prompts;
  for (const auto& [a, b] : split.valid)
    prompts.push_back(tmpl.encode(tok, {{"user", data::arithmetic_question(a, b), std::nullopt}}, data::ChatOptions{}));
  infer::GenerateOptions opt;
  opt.stop.max_new_tokens = 10;
  opt.stop.eos_ids = {uint32_t(tok.token_to_id("<|im_end|>")), tok.eot_id()};
  opt.pad_id = tok.eot_id();
  infer::CachedLogitsSource source(trainer.model());
  const auto results = infer::generate(source, tok, prompts, opt);
  int64_t right = 0, right_length = 0, right_last = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto [a, b] = split.valid[i];
    const std::string got = answer_of(results[i].text), want = data::arithmetic_answer(a, b);
    right += got == want;
    right_length += got.size() == want.size();
    right_last += !got.empty() && got.back() == want.back();
    if (i < 3) std::printf("  %s -> %s\n", data::arithmetic_question(a, b).c_str(), answer_of(results[i].text).c_str());
  }
  const double accuracy = double(right) / double(results.size());
  std::printf("held-out exact match: %lld / %zu = %.1f%% after %lld steps (right length %lld, right last digit %lld)\n",
              (long long)right, results.size(), 100 * accuracy, (long long)cfg.training.steps, (long long)right_length,
              (long long)right_last);
  EXPECT_GE(accuracy, 0.9);
  fs::remove_all(work);
}
