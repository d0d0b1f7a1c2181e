// Argument checks shared by the RMSNorm variants (see rmsnorm.h for the math).
#pragma once
#include "ops/op_checks.h"
#include "ops/row_view.h"

namespace titan::rmsnorm_detail {

struct Dims {
  int64_t n, d;  // vectors, vector length
};

// x: [n, h, D] f32 rows with D = w.numel(); y (or dy, dx): the same rows; rstd: one value per
// vector. y may be BF16 (forward output), every other operand is f32.
inline Dims check_forward(const RowView& x, const Tensor& w, const RowView& y, const Tensor& rstd,
                          const char* y_name = "y", bool y_may_be_bf16 = true) {
  opcheck::f32(w, "rmsnorm", "w");
  opcheck::f32(rstd, "rmsnorm", "rstd");
  TITAN_CHECK(w.ndim() == 1 && w.numel() > 0, "rmsnorm: 'w' must be [D] with D > 0, got ", w.str());
  check_view(x, DType::F32, "rmsnorm", "x");
  check_view(y, y_may_be_bf16 && y.t.defined() && y.t.dtype() == DType::BF16 ? DType::BF16 : DType::F32, "rmsnorm",
             y_name);
  TITAN_CHECK(x.d == w.numel(), "rmsnorm: vectors of 'x' have length ", x.d, " but 'w' is ", w.str());
  check_same_rows(x, y, "rmsnorm", "x", y_name);
  opcheck::numel(rstd, x.vectors(), "rmsnorm", "rstd");
  return {x.vectors(), x.d};
}

inline Dims check_backward(const RowView& x, const Tensor& w, const Tensor& rstd, const RowView& dy,
                           const RowView& dx, const Tensor& dw) {
  Dims d = check_forward(x, w, dy, rstd, "dy", false);
  check_view(dx, DType::F32, "rmsnorm", "dx");
  check_same_rows(x, dx, "rmsnorm", "x", "dx");
  if (dw.defined()) {  // undefined: the weight is frozen and gets no gradient
    opcheck::f32(dw, "rmsnorm", "dw");
    opcheck::numel(dw, d.d, "rmsnorm", "dw");
  }
  return d;
}

}  // namespace titan::rmsnorm_detail
