// Argument checks shared by the bias variants.
#pragma once
#include "ops/bias/bias.h"
#include "ops/op_checks.h"

namespace titan::bias_checks {

// y / dy [M, N] f32, b / db [N] f32; returns N.
inline int64_t check(const Tensor& y, const Tensor& b, const char* yname, const char* bname) {
  opcheck::f32(y, "bias", yname);
  opcheck::f32(b, "bias", bname);
  TITAN_CHECK(y.ndim() == 2 && b.ndim() == 1 && b.dim(0) == y.dim(1), "bias: '", bname, "' ", b.str(),
              " does not match the columns of '", yname, "' ", y.str());
  return b.dim(0);
}

}  // namespace titan::bias_checks
