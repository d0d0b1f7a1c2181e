// Argument checks shared by the SwiGLU variants (see swiglu.h for the math).
#pragma once
#include "ops/op_checks.h"

namespace titan::swiglu_detail {

struct Dims {
  int64_t n, i;  // rows, intermediate size (gu rows are 2I long)
};

// gu: [..., 2I] f32; out (or dout): [..., I] f32 with the same number of rows.
inline Dims check(const Tensor& gu, const Tensor& out, const char* out_name) {
  opcheck::f32(gu, "swiglu", "gu");
  opcheck::f32(out, "swiglu", out_name);
  TITAN_CHECK(gu.ndim() >= 1 && gu.dim(-1) % 2 == 0 && gu.dim(-1) > 0,
              "swiglu: 'gu' must be [..., 2I] (gate then up), got ", gu.str());
  const int64_t I = gu.dim(-1) / 2, N = gu.numel() / (2 * I);
  opcheck::last_dim(out, I, "swiglu", out_name);
  opcheck::numel(out, N * I, "swiglu", out_name);
  return {N, I};
}

}  // namespace titan::swiglu_detail
