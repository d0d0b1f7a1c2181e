// RMSNorm as HF Qwen3RMSNorm:  y = w * x / sqrt(mean(x^2) + eps), vectors of length D.
//   x: [N, D] f32, w: [D] f32 -> y: [N, D], rstd: [N] (saved for backward)
//   backward: dx[N, D] = or += (overwrite, or accumulate into the residual stream's gradient,
//     as llm.c's layernorm_backward and TransformerEngine's rmsnorm_bwd_add), dw[D] += (accumulate)
//     dx = rstd * (w*dy - x_hat * mean(w*dy*x_hat)),  dw += sum_n dy * x_hat
//
// The kernels take their operands as row views (ops/row_view.h): the N = n h vectors of an
// [n, h, D] view whose rows may be strided, so the per-head q/k norm reads its input from the
// fused qkv buffer and writes its input gradient straight into the fused gradient. y may be BF16:
// then it is the bf16 rounding (to nearest even) of the f32 result, written for a bf16 GEMM that
// reads it next (no separate rounding pass). dx may be the same view as dy (in place).
#pragma once
#include "core/tensor.h"
#include "ops/registry.h"
#include "ops/row_view.h"

namespace titan {

struct RMSNormKernel {
  static constexpr const char* op_name = "rmsnorm";
  const char* variant;
  void (*forward_rows)(const ExecContext& ctx, const RowView& x, const Tensor& w, float eps, const RowView& y,
                       Tensor& rstd);
  void (*backward_rows)(const ExecContext& ctx, const RowView& x, const Tensor& w, const Tensor& rstd,
                        const RowView& dy, const RowView& dx, Tensor& dw, bool accumulate_dx);

  // Contiguous x, y, dy, dx: [..., D] with D = w.numel().
  void forward(const ExecContext& ctx, const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) const {
    forward_rows(ctx, rows(x, w, "x"), w, eps, rows(y, w, "y"), rstd);
  }
  void backward(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                Tensor& dx, Tensor& dw) const {
    backward_rows(ctx, rows(x, w, "x"), w, rstd, rows(dy, w, "dy"), rows(dx, w, "dx"), dw, false);
  }
  // dx += the input gradient.
  void backward_add(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                    Tensor& dx, Tensor& dw) const {
    backward_rows(ctx, rows(x, w, "x"), w, rstd, rows(dy, w, "dy"), rows(dx, w, "dx"), dw, true);
  }

 private:
  static RowView rows(const Tensor& t, const Tensor& w, const char* name) {
    TITAN_CHECK(t.defined() && w.defined() && w.ndim() == 1 && w.numel() > 0 && t.ndim() >= 1 && t.dim(-1) == w.numel(),
                "rmsnorm: '", name, "' ", t.defined() ? t.str() : std::string("undefined"),
                " must be [..., D] with D = w.numel() (w ", w.defined() ? w.str() : std::string("undefined"), ")");
    return RowView::of(t, 1, w.numel());
  }
};

}  // namespace titan
