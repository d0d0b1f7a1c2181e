// Argument checks shared by the SwiGLU variants (see swiglu.h for the math).
#pragma once
#include "ops/op_checks.h"

namespace titan::swiglu_detail {

struct Dims {
  int64_t n, i;  // rows, intermediate size (gu rows are 2I long)
};

// gu: [..., 2I] f32; out (or dout): [..., I] with the same number of rows, f32 (or BF16 where
// out_may_be_bf16: the forward's output).
inline Dims check(const Tensor& gu, const Tensor& out, const char* out_name, bool out_may_be_bf16 = false) {
  opcheck::f32(gu, "swiglu", "gu");
  if (!(out_may_be_bf16 && out.defined() && out.dtype() == DType::BF16)) opcheck::f32(out, "swiglu", out_name);
  TITAN_CHECK(gu.ndim() >= 1 && gu.dim(-1) % 2 == 0 && gu.dim(-1) > 0,
              "swiglu: 'gu' must be [..., 2I] (gate then up), got ", gu.str());
  const int64_t I = gu.dim(-1) / 2, N = gu.numel() / (2 * I);
  opcheck::last_dim(out, I, "swiglu", out_name);
  opcheck::numel(out, N * I, "swiglu", out_name);
  return {N, I};
}

// dgu: gu's shape, f32 or BF16.
inline void check_dgu(const Tensor& gu, const Tensor& dgu) {
  opcheck::defined(dgu, "swiglu", "dgu");
  TITAN_CHECK(dgu.dtype() == DType::F32 || dgu.dtype() == DType::BF16, "swiglu: 'dgu' must be f32 or bf16, got ",
              dgu.str());
  opcheck::same_shape(dgu, gu, "swiglu", "dgu", "gu");
}

}  // namespace titan::swiglu_detail
