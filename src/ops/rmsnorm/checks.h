// Argument checks shared by the RMSNorm variants (see rmsnorm.h for the math).
#pragma once
#include "ops/op_checks.h"

namespace titan::rmsnorm_detail {

struct Dims {
  int64_t n, d;  // rows, row length
};

// x: [..., D] f32 with D = w.numel(); rstd holds one value per row; other: y or dy/dx (x's shape).
inline Dims check_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd) {
  opcheck::f32(x, "rmsnorm", "x");
  opcheck::f32(w, "rmsnorm", "w");
  opcheck::f32(y, "rmsnorm", "y");
  opcheck::f32(rstd, "rmsnorm", "rstd");
  TITAN_CHECK(w.ndim() == 1 && w.numel() > 0, "rmsnorm: 'w' must be [D] with D > 0, got ", w.str());
  const int64_t D = w.numel();
  opcheck::last_dim(x, D, "rmsnorm", "x");
  opcheck::numel(y, x.numel(), "rmsnorm", "y");
  const int64_t N = x.numel() / D;
  opcheck::numel(rstd, N, "rmsnorm", "rstd");
  return {N, D};
}

inline Dims check_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                           const Tensor& dw) {
  Dims d = check_forward(x, w, dy, rstd);
  opcheck::f32(dx, "rmsnorm", "dx");
  opcheck::f32(dw, "rmsnorm", "dw");
  opcheck::numel(dx, x.numel(), "rmsnorm", "dx");
  opcheck::numel(dw, d.d, "rmsnorm", "dw");
  return d;
}

}  // namespace titan::rmsnorm_detail
