// The whole model against transformers' goldens (tools/oracle/qwen3_goldens.py): logits, loss
// and the gradient of every parameter, for each kernel set.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/token_lines.h"
#include "model/hf_model.h"
#include "util/strings.h"
#include "unit/model/golden_check.h"

using namespace titan;

namespace {

struct Case {
  std::string name, kernels;
};

std::string fixture(const std::string& name) { return std::string(TITAN_FIXTURES) + "/qwen3/" + name; }

class Golden : public ::testing::TestWithParam<Case> {};

TEST_P(Golden, LogitsLossAndGradientsMatchTransformers) {
  titan::testing::expect_matches_golden(fixture(GetParam().name), GetParam().kernels);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const char* n : {"tied_gqa2_hd16", "untied_gqa1", "tied_gqa4_odd", "untied_gqa2_long"})
    for (const char* k : {"reference", "cpu"}) v.push_back({n, k});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Qwen3, Golden, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name + "_" + info.param.kernels; });

}  // namespace

// bf16 matmul inputs (f32 master weights, f32 accumulation): close to the f32 oracle within
// bf16 rounding (8 bits of mantissa), on the same fixtures.
TEST(Qwen3Bf16, MixedPrecisionStaysCloseToTheF32Oracle) {
  for (const char* name : {"tied_gqa2_hd16", "untied_gqa2_long"}) {
    SCOPED_TRACE(name);
    titan::testing::expect_bf16_close_to_golden(fixture(name), "cpu");
  }
}
