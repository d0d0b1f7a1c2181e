// Logits processors against transformers (fixture from tools/oracle/sampling_goldens.py) and the
// seeded sampler's reproducibility.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "infer/sampling.h"
#include "util/strings.h"

using namespace titan;
using namespace titan::infer;
using nlohmann::json;

namespace {
const json& goldens() {
  static const json j = json::parse(read_file(std::string(TITAN_FIXTURES) + "/sampling/processors.json"));
  return j;
}
double or_default(const json& j, double d) { return j.is_null() ? d : j.get<double>(); }
}  // namespace

TEST(Sampling, ProcessorsMatchTransformersSurvivorsAndProbabilities) {
  const int64_t V = goldens()["vocab"].get<int64_t>();
  int checked = 0;
  double worst_p = 0, worst_s = 0;
  for (const json& c : goldens()["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    SamplingParams p;
    p.temperature = or_default(c["temperature"], 1.0);
    p.top_k = c["top_k"].is_null() ? 0 : c["top_k"].get<int64_t>();
    p.top_p = or_default(c["top_p"], 1.0);
    p.min_p = or_default(c["min_p"], 0.0);
    p.repetition_penalty = or_default(c["repetition_penalty"], 1.0);
    validate(p);
    std::vector<float> s = c["logits"].get<std::vector<float>>();
    ASSERT_EQ(int64_t(s.size()), V);
    process_logits(s.data(), V, c["context"].get<std::vector<uint32_t>>(), p);
    std::vector<double> probs = probabilities(s.data(), V);
    for (int64_t i = 0; i < V; ++i) {
      const json& want = c["scores"][size_t(i)];
      if (want.is_null()) {
        EXPECT_EQ(s[size_t(i)], -std::numeric_limits<float>::infinity()) << "token " << i << " should be filtered";
      } else {
        ASSERT_TRUE(std::isfinite(s[size_t(i)])) << "token " << i << " should survive";
        const double w = want.get<double>();
        worst_s = std::max(worst_s, std::abs(s[size_t(i)] - w) / std::max(1.0, std::abs(w)));
        EXPECT_NEAR(s[size_t(i)], w, 1e-5 * std::max(1.0, std::abs(w))) << "token " << i;
      }
      const double wp = c["probs"][size_t(i)].get<double>();
      worst_p = std::max(worst_p, std::abs(probs[size_t(i)] - wp));
      EXPECT_NEAR(probs[size_t(i)], wp, 1e-6) << "token " << i;
    }
    ++checked;
  }
  EXPECT_GE(checked, 50);
  std::printf("max |prob - transformers| = %.3g, max relative score diff = %.3g\n", worst_p, worst_s);
}

TEST(Sampling, GreedyIsArgmaxAfterPenaltyOnly) {
  std::vector<float> s = {1.f, 5.f, 5.f, -2.f, 4.9f};
  SamplingParams p;  // temperature 0
  p.top_k = 1;       // ignored when greedy
  EXPECT_EQ(choose_next(s.data(), 5, {}, p, 0, 0), 1);  // first index on ties
  std::vector<float> t = {1.f, 5.f, 5.f, -2.f, 4.9f};
  p.repetition_penalty = 2.0;
  EXPECT_EQ(choose_next(t.data(), 5, {1, 2, 2}, p, 0, 0), 4);  // 5/2 < 4.9
  EXPECT_FLOAT_EQ(t[1], 2.5f);
}

TEST(Sampling, DrawsAreReproducibleAndFollowTheDistribution) {
  SamplingParams p;
  p.temperature = 1.0;
  p.seed = 42;
  const std::vector<float> logits = {0.f, 1.f, 2.f, -1.f, 0.5f};
  const std::vector<double> probs = probabilities(logits.data(), 5);
  std::vector<int> counts(5, 0);
  const int n = 20000;
  std::vector<int64_t> first;
  for (int step = 0; step < n; ++step) {
    std::vector<float> s = logits;
    int64_t t = choose_next(s.data(), 5, {}, p, /*stream=*/3, uint64_t(step));
    ++counts[size_t(t)];
    if (step < 50) first.push_back(t);
  }
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(counts[size_t(i)] / double(n), probs[size_t(i)], 0.015) << i;
  // Same seed, stream and steps: same tokens, computed in any order or thread.
  std::vector<int64_t> again(50);
#pragma omp parallel for num_threads(2)
  for (int step = 49; step >= 0; --step) {
    std::vector<float> s = logits;
    again[size_t(step)] = choose_next(s.data(), 5, {}, p, 3, uint64_t(step));
  }
  EXPECT_EQ(first, again);
  // Another stream or seed gives another sequence.
  std::vector<int64_t> other, reseeded;
  SamplingParams q = p;
  q.seed = 43;
  for (int step = 0; step < 50; ++step) {
    std::vector<float> s = logits, u = logits;
    other.push_back(choose_next(s.data(), 5, {}, p, 4, uint64_t(step)));
    reseeded.push_back(choose_next(u.data(), 5, {}, q, 3, uint64_t(step)));
  }
  EXPECT_NE(first, other);
  EXPECT_NE(first, reseeded);
}

TEST(Sampling, DrawNeverPicksAFilteredToken) {
  std::vector<double> probs = {0.0, 0.25, 0.0, 0.75, 0.0};
  EXPECT_EQ(draw(probs, 1e-12), 1);
  EXPECT_EQ(draw(probs, 0.25), 1);
  EXPECT_EQ(draw(probs, 0.2500001), 3);
  EXPECT_EQ(draw(probs, 1.0 - 1e-16), 3);
  for (uint64_t k = 0; k < 1000; ++k) {
    double u = philox_uniform(1, 2, k);
    EXPECT_GT(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

TEST(Sampling, InvalidParametersAreErrorsNamingTheOption) {
  auto err = [](SamplingParams p) {
    try {
      validate(p);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SamplingParams p;
  p.temperature = -1;
  EXPECT_NE(err(p).find("--temperature"), std::string::npos);
  p = {};
  p.top_p = 0;
  EXPECT_NE(err(p).find("--top-p"), std::string::npos);
  p = {};
  p.min_p = 1.5;
  EXPECT_NE(err(p).find("--min-p"), std::string::npos);
  p = {};
  p.repetition_penalty = 0;
  EXPECT_NE(err(p).find("--repetition-penalty"), std::string::npos);
  p = {};
  p.top_k = -3;
  EXPECT_NE(err(p).find("--top-k"), std::string::npos);
}
