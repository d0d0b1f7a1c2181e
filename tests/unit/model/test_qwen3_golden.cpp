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
  const Case& c = GetParam();
  const std::string dir = fixture(c.name);
  auto model = load_hf_model(dir, c.kernels);
  Tensor ids = read_token_lines(dir + "/tokens.txt");
  Tensor labels = next_token_labels(ids);
  const int64_t count = count_labels(labels);
  auto golden = SafetensorsFile::open(dir + "/golden.safetensors");
  auto meta = nlohmann::json::parse(read_file(dir + "/golden.json"));
  const double want_loss = meta["loss"].get<double>();

  const int64_t N = ids.numel(), V = model->config().vocab_size;
  Tensor logits = Tensor::empty({N, V}, DType::F32);
  double loss = model->forward(ids, labels, &logits) / double(count);
  EXPECT_NEAR(loss, want_loss, 1e-5);
  Tensor gl = golden.get("logits", DType::F32);
  ASSERT_EQ(gl.numel(), logits.numel());
  const double max_abs = titan::testing::max_abs_diff(gl, logits);
  EXPECT_LE(max_abs, 1e-4) << "logits max abs diff";

  model->params().zero_grad();
  double loss2 = model->forward_backward(ids, labels, float(1.0 / double(count))) / double(count);
  EXPECT_NEAR(loss2, want_loss, 1e-5);
  double worst_grad = 0;
  for (auto& p : model->params().all()) {
    SCOPED_TRACE(p.name);
    ASSERT_TRUE(golden.contains(p.name));
    Tensor g = golden.get(p.name, DType::F32);
    ASSERT_EQ(g.shape(), p.grad.shape());
    // Relative to the tensor's largest gradient entry, so near-zero entries do not dominate.
    const double rel = titan::testing::max_diff_rel_to_peak(g, p.grad);
    EXPECT_LE(rel, 1e-3);
    worst_grad = std::max(worst_grad, rel);
  }
  std::printf("%s/%s: |loss - hf| %.2e, logits max abs diff %.2e, worst grad rel diff %.2e\n", c.name.c_str(),
              c.kernels.c_str(), std::fabs(loss - want_loss), max_abs, worst_grad);
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
