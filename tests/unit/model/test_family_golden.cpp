// Llama and Qwen2 (the Qwen3 decoder without the q/k norm, Qwen2 with q/k/v biases) against
// transformers' goldens (tools/oracle/family_goldens.py): logits, loss and every gradient, biases
// included, for each kernel set; and bf16 compute close to the f32 oracle.
#include <gtest/gtest.h>

#include "unit/model/golden_check.h"

namespace {

struct Case {
  std::string family, name, kernels;
};

std::string fixture(const Case& c) { return std::string(TITAN_FIXTURES) + "/" + c.family + "/" + c.name; }

class FamilyGolden : public ::testing::TestWithParam<Case> {};

TEST_P(FamilyGolden, LogitsLossAndGradientsMatchTransformers) {
  titan::testing::expect_matches_golden(fixture(GetParam()), GetParam().kernels);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  const std::pair<const char*, const char*> fixtures[] = {{"llama", "tied_gqa2"},
                                                          {"llama", "untied_hd16_gqa4"},
                                                          {"llama", "llama3_rope_long"},
                                                          {"qwen2", "tied_gqa2"},
                                                          {"qwen2", "untied_gqa1_long"}};
  for (const auto& [f, n] : fixtures)
    for (const char* k : {"reference", "cpu"}) v.push_back({f, n, k});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyGolden, ::testing::ValuesIn(cases()), [](const auto& info) {
  return info.param.family + "_" + info.param.name + "_" + info.param.kernels;
});

TEST(FamilyBf16, MixedPrecisionStaysCloseToTheF32Oracle) {
  for (const Case& c : {Case{"llama", "llama3_rope_long", "cpu"}, Case{"qwen2", "untied_gqa1_long", "cpu"}}) {
    SCOPED_TRACE(c.family + "/" + c.name);
    titan::testing::expect_bf16_close_to_golden(fixture(c), c.kernels);
  }
}

}  // namespace
