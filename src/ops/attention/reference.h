// The attention reference in double precision, on raw arrays (layouts as in attention.h). The
// registered "reference" kernel converts f32 tensors to double and calls these; tests call them
// directly for finite-difference checks of the backward in double.
#pragma once
#include <cstdint>

#include "ops/attention/shape.h"

namespace titan::attention {

// out [B, S, Hq, D], lse [B, Hq, S].
// seg [B * S] (optional): block-causal, query s sees keys seg[s] <= t <= s (ops/attention/segments.h).
void reference_forward(const Dims& d, const double* q, const double* k, const double* v, double scale, double* out,
                       double* lse, const int64_t* seg = nullptr);

// dq [B, S, Hq, D], dk and dv [B, S, Hkv, D], all overwritten. The probabilities are recomputed in
// double from q and k, and D_s = sum_t P_st dP_st, so out and lse are not needed.
void reference_backward(const Dims& d, const double* q, const double* k, const double* v, const double* dout,
                        double scale, double* dq, double* dk, double* dv, const int64_t* seg = nullptr);

}  // namespace titan::attention
