// Shared checks of a model folder against its transformers goldens (tools/oracle/*_goldens.py).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/token_lines.h"
#include "model/hf_model.h"
#include "util/strings.h"

namespace titan::testing {

// Largest |a - b| over two f32 tensors of equal size.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  return m;
}

// max |got - ref| relative to the largest |ref| entry, so near-zero entries do not dominate.
inline double max_diff_rel_to_peak(const Tensor& ref, const Tensor& got) {
  double peak = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) peak = std::max(peak, double(std::fabs(ref.data<float>()[i])));
  return max_abs_diff(ref, got) / std::max(peak, 1e-12);
}

// The whole model against transformers' goldens (logits, loss, the gradient of every parameter).
inline void expect_matches_golden(const std::string& dir, const std::string& kernels) {
  auto model = load_hf_model(dir, kernels);
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
  const double max_abs = max_abs_diff(gl, logits);
  EXPECT_LE(max_abs, 1e-4) << "logits max abs diff";

  model->params().zero_grad();
  double loss2 = model->forward_backward(ids, labels, float(1.0 / double(count))) / double(count);
  EXPECT_NEAR(loss2, want_loss, 1e-5);
  // Every HF parameter has its gradient here (the golden holds the logits and one per parameter).
  EXPECT_EQ(model->params().all().size() + 1, golden.size()) << "parameter count differs from transformers'";
  double worst_grad = 0;
  for (auto& p : model->params().all()) {
    SCOPED_TRACE(p.name);
    ASSERT_TRUE(golden.contains(p.name));
    Tensor g = golden.get(p.name, DType::F32);
    ASSERT_EQ(g.shape(), p.grad.shape());
    // Relative to the tensor's largest gradient entry, so near-zero entries do not dominate.
    const double rel = max_diff_rel_to_peak(g, p.grad);
    EXPECT_LE(rel, 1e-3);
    worst_grad = std::max(worst_grad, rel);
  }
  std::printf("%s/%s: |loss - hf| %.2e, logits max abs diff %.2e, worst grad rel diff %.2e\n", dir.c_str(),
              kernels.c_str(), std::fabs(loss - want_loss), max_abs, worst_grad);
}


// bf16 matmul inputs (f32 master weights and accumulation) against the f32 oracle: loss within
// 2%, every parameter gradient within 5% relative L2 error, and the result not bit-equal to the
// f32 loss (bf16 really ran).
inline void expect_bf16_close_to_golden(const std::string& dir, const std::string& kernels) {
  auto model = load_hf_model(dir, kernels);
  model->set_compute_dtype(DType::BF16);
  Tensor ids = read_token_lines(dir + "/tokens.txt");
  Tensor labels = next_token_labels(ids);
  const int64_t count = count_labels(labels);
  auto golden = SafetensorsFile::open(dir + "/golden.safetensors");
  const double want = nlohmann::json::parse(read_file(dir + "/golden.json"))["loss"].get<double>();
  model->params().zero_grad();
  const double loss = model->forward_backward(ids, labels, float(1.0 / double(count))) / double(count);
  EXPECT_NEAR(loss, want, 2e-2 * want);
  EXPECT_NE(loss, want);
  for (auto& p : model->params().all()) {
    Tensor g = golden.get(p.name, DType::F32);
    double num = 0, den = 0;
    for (int64_t i = 0; i < g.numel(); ++i) {
      double d = double(g.data<float>()[i]) - p.grad.data<float>()[i];
      num += d * d;
      den += double(g.data<float>()[i]) * g.data<float>()[i];
    }
    EXPECT_LE(std::sqrt(num / std::max(den, 1e-30)), 5e-2) << p.name;
  }
}

}  // namespace titan::testing
