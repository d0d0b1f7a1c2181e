// Residual add: y = a + b (same shape, f32). Backward is the identity to both inputs, so the
// kernel also serves gradient accumulation: accumulate(dst, src) is dst += src.
#pragma once
#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

struct ResidualKernel {
  static constexpr const char* op_name = "residual";
  const char* variant;
  void (*forward)(const ExecContext& ctx, const Tensor& a, const Tensor& b, Tensor& y);  // y may alias a
  void (*accumulate)(const ExecContext& ctx, Tensor& dst, const Tensor& src);            // dst += src
};

}  // namespace titan
