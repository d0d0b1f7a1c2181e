// A LoRA adapter's gradient against central differences of the loss, shared by the LoRA tests of
// each family (test_lora_qwen3_5.cpp, test_lora_moe.cpp, test_lora_qwen3_5_moe.cpp).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "model/decoder.h"

namespace titan::test {

// Checks `samples` elements of adapter tensor p (fixed hashed indices) of model m, whose gradient
// holds d(loss / count)/dp from a forward_backward on (ids, labels): each against the central
// difference (loss(p + h) - loss(p - h)) / 2h, within 1e-2 of the gradient's peak + 2e-4.
// Returns the worst |grad - difference| / peak.
inline double adapter_grad_vs_central_difference(DecoderModel& m, Param& p, const Tensor& ids, const Tensor& labels,
                                                 double count, double h, int samples) {
  double peak = 0;
  for (int64_t i = 0; i < p.grad.numel(); ++i) peak = std::max(peak, double(std::fabs(p.grad.data<float>()[i])));
  EXPECT_GT(peak, 0) << p.name;
  if (peak == 0) return 0;
  double worst = 0;
  for (int k = 0; k < samples; ++k) {
    const int64_t i = (k * 7919 + 13) % p.value.numel();
    float& v = p.value.data<float>()[i];
    const float v0 = v;
    v = float(v0 + h);
    const double lp = m.forward(ids, labels) / count;
    v = float(v0 - h);
    const double lm = m.forward(ids, labels) / count;
    v = v0;
    const double fd = (lp - lm) / (2 * h), g = p.grad.data<float>()[i];
    worst = std::max(worst, std::fabs(fd - g) / peak);
    EXPECT_NEAR(g, fd, 1e-2 * peak + 2e-4) << p.name << " element " << i;
  }
  return worst;
}

}  // namespace titan::test
