// Token embedding.  out[n, :] = weight[ids[n], :]
//   ids: [N] i32 or i64, each in [0, V) (checked: an out-of-range id is an error)
//   weight: [V, H] f32; out: [N, H] f32
//   backward: dweight[ids[n], :] += dout[n, :] (accumulate)
#pragma once
#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

struct EmbeddingKernel {
  static constexpr const char* op_name = "embedding";
  const char* variant;
  void (*forward)(const ExecContext& ctx, const Tensor& ids, const Tensor& weight, Tensor& out);
  void (*backward)(const ExecContext& ctx, const Tensor& ids, const Tensor& dout, Tensor& dweight);
};

}  // namespace titan
