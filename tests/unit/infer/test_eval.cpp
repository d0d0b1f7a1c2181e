// Sliding-window perplexity against transformers' perplexity guide on the tiny model (fixture
// from tools/oracle/generate_goldens.py).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/tokenizer.h"
#include "infer/eval.h"
#include "model/hf_model.h"
#include "infer_fixtures.h"
#include "util/strings.h"

using namespace titan;
using namespace titan::infer;
using nlohmann::json;

namespace {
std::string fixture(const std::string& rel) { return test::infer_fixture(rel); }
const json& goldens() { return test::infer_goldens("eval.json"); }
}  // namespace

TEST(Eval, DatasetTokensMatchTransformersTokenizer) {
  data::Tokenizer tok = data::Tokenizer::load(fixture("tiny_chat"));
  data::DatasetSpec spec;
  spec.name_or_path = fixture("eval_docs.jsonl");
  spec.cache_dir = "none";
  spec.progress = false;
  auto ds = data::TokenDataset::load(spec, tok, [](const std::string&) {});
  std::vector<int64_t> ids(ds->size());
  ds->read(0, ids.size(), ids.data());
  EXPECT_EQ(ids, goldens()["ids"].get<std::vector<int64_t>>());
}

TEST(Eval, SlidingWindowLossMatchesTransformersGuide) {
  auto model = load_hf_model(fixture("tiny_chat"));
  const auto ids = goldens()["ids"].get<std::vector<uint32_t>>();
  double worst = 0;
  for (const json& run : goldens()["runs"]) {
    const int64_t seq_len = run["seq_len"].get<int64_t>(), stride = run["stride"].get<int64_t>();
    SCOPED_TRACE("seq_len " + std::to_string(seq_len) + " stride " + std::to_string(stride));
    const EvalResult r = evaluate(*model, ids, seq_len, stride);
    const double want = run["loss"].get<double>(), guide = run["guide_loss"].get<double>();
    EXPECT_EQ(r.tokens, run["tokens"].get<int64_t>());
    EXPECT_EQ(r.windows, run["windows"].get<int64_t>());
    EXPECT_NEAR(r.loss(), want, 1e-5 * want);
    EXPECT_NEAR(r.guide_loss, guide, 1e-5 * guide);
    EXPECT_NEAR(r.perplexity(), std::exp(want), 1e-5 * std::exp(want) * 2);
    worst = std::max(worst, std::abs(r.loss() - want) / want);
  }
  std::printf("max relative loss difference to transformers: %.3g\n", worst);
}

TEST(Eval, WindowPlanFollowsTheGuide) {
  // n = 10, seq_len 4, stride 2: windows [0,4) [2,6) [4,8) [6,10); targets after the previous end.
  auto w = sliding_windows(10, 4, 2);
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[0].first_target, 1);
  EXPECT_EQ(w[1].begin, 2);
  EXPECT_EQ(w[1].first_target, 4);
  EXPECT_EQ(w[3].end, 10);
  EXPECT_EQ(w[3].first_target, 8);
  // No overlap: each window's first token has no context and is not scored.
  w = sliding_windows(5, 2, 2);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[1].first_target, 3);
  EXPECT_EQ(w[2].first_target, 5);  // [4,5): nothing to score
  auto err = [](int64_t n, int64_t s, int64_t st) {
    try {
      sliding_windows(n, s, st);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err(10, 4, 5).find("--stride must be in [1, --seq-len 4]"), std::string::npos);
  EXPECT_NE(err(1, 4, 2).find("at least 2"), std::string::npos);
  EXPECT_NE(err(10, 1, 1).find("--seq-len must be at least 2"), std::string::npos);
}
