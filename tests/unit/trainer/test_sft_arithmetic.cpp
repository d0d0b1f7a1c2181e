// The supervised fine-tuning demonstration (recipes/sft_arithmetic.toml): a generated chat dataset
// of "What is a + b?" questions, trained with the loss on the assistant's answers only, packed
// block-causal, with validation; then greedy answers to the held-out questions, scored by exact
// match of the number after the template's empty think block.
//
// ctest runs a shortened schedule (TITAN_SFT_STEPS, default 60 steps) and checks that the
// validation loss falls and the pipeline answers; TITAN_SFT_FULL=1 runs the recipe's full schedule
// and asserts the accuracy target (>= 90% exact match).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "data/arithmetic.h"
#include "data/chat_template.h"
#include "dist/comm.h"
#include "infer/generate.h"
#include "infer/kv_source.h"
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

TEST(SftArithmetic, ValidationLossFallsAndHeldOutAnswersAreScored) {
  const std::string src = TITAN_SOURCE_DIR;
  const fs::path work = fs::temp_directory_path() / ("titan_sft_test_" + std::to_string(::getpid()));
  fs::remove_all(work);
  data::ArithmeticOptions ao;  // the recipe's data: operands 0..99, 200 held out
  data::write_arithmetic((work / "data").string(), ao);

  JobConfig cfg = load_job_config_file(src + "/recipes/sft_arithmetic.toml");
  const bool full = std::getenv("TITAN_SFT_FULL") && std::string(std::getenv("TITAN_SFT_FULL")) == "1";
  const char* steps_env = std::getenv("TITAN_SFT_STEPS");
  if (!full) {
    cfg.training.steps = steps_env ? std::atoll(steps_env) : 60;
    cfg.lr_scheduler.warmup_steps = std::min<int64_t>(cfg.lr_scheduler.warmup_steps, cfg.training.steps / 3);
    cfg.validation.freq = std::max<int64_t>(1, cfg.training.steps / 3);
  }
  cfg.job.dump_folder = (work / "run").string();
  cfg.model.hf_assets_path = src + "/assets/qwen3-tokenizer";
  cfg.training.dataset_path = (work / "data" / "train.jsonl").string();
  cfg.validation.dataset_path = (work / "data" / "valid.jsonl").string();
  cfg.checkpoint.enable = false;
  cfg.checkpoint.last_save_in_hf = false;
  cfg.metrics.enable_tensorboard = false;
  cfg.validation.sample_prompts.clear();

  dist::LocalComm comm;
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
  infer::KvCacheLogitsSource source(trainer.model());
  const auto results = infer::generate(source, tok, prompts, opt);
  int64_t right = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto [a, b] = split.valid[i];
    right += answer_of(results[i].text) == data::arithmetic_answer(a, b);
    if (i < 3) std::printf("  %s -> %s\n", data::arithmetic_question(a, b).c_str(), answer_of(results[i].text).c_str());
  }
  const double accuracy = double(right) / double(results.size());
  std::printf("held-out exact match: %lld / %zu = %.1f%% after %lld steps\n", (long long)right, results.size(),
              100 * accuracy, (long long)cfg.training.steps);
  if (full) {
    EXPECT_GE(accuracy, 0.9);
  }
  fs::remove_all(work);
}
