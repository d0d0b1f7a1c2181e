// The gated delta rule (Gated DeltaNet linear attention, Qwen3.5 / Qwen3-Next), as transformers'
// torch_recurrent_gated_delta_rule and torch_chunk_gated_delta_rule with use_qk_l2norm_in_kernel:
//
//   q, k: [B, S, Hk, dk], v: [B, S, Hv, dv], g (log decay), beta: [B, S, Hv]; Hv % Hk == 0 and value
//   head h reads key head h / (Hv / Hk) (transformers' repeat_interleave).
//   q^ = scale * q / sqrt(|q|^2 + 1e-6), k^ = k / sqrt(|k|^2 + 1e-6)   (opts.l2norm; else q^ = scale q, k^ = k)
//   per value head, state S [dk, dv] (zero, or initial_state [B, Hv, dk, dv]), token by token:
//     S = exp(g_t) S;  delta = beta_t (v_t - S^T k^_t);  S = S + k^_t delta^T;  out_t = S^T q^_t
//   out: [B, S, Hv, dv]; final_state (optional): S after the last token [B, Hv, dk, dv].
//
// Block-causal packing (seg [B * S] as the attention op takes it, ops/attention/segments.h): the
// state restarts from zero at each document start; initial_state, when given, is the state
// before the first document of each row only, and final_state the state after the row's last
// document.
//
// Backward: dq, dk, dv, dg, dbeta (overwritten), d_initial_state when defined (overwritten);
// d_final_state (optional) is the gradient flowing into final_state.
//
// Variants: "reference" runs the recurrence token by token in double (the backward stores every
// state and runs it in reverse); "cpu" runs the chunked form in f32 (docs/qwen3_5.md): chunks of
// opts.chunk tokens (a document's last chunk may be shorter), the WY form of the within-chunk
// recurrence solved by forward substitution, and a backward derived through the same chunks.
// step() is one decode token on a state held in place.
#pragma once
#include <cstdint>

#include "core/exec_context.h"
#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

struct GatedDeltaOptions {
  bool l2norm = true;   // q, k L2-normalised in the kernel (Qwen3.5)
  float scale = 0.0f;   // q scale; <= 0: 1 / sqrt(dk)
  int64_t chunk = 16;   // chunk length of the chunked form (cpu variant; measured, bench/gated_delta/RESULTS.md)
};

// One token per row: q, k [B, Hk, dk], v [B, Hv, dv], g, beta [B, Hv], state [B, Hv, dk, dv] (read and
// updated), out [B, Hv, dv].
struct GatedDeltaKernel {
  static constexpr const char* op_name = "gated_delta";
  const char* variant;
  void (*forward)(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                  const Tensor& beta, const int64_t* seg, const Tensor& initial_state, const GatedDeltaOptions& o,
                  Tensor& out, Tensor& final_state);
  void (*backward)(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                   const Tensor& beta, const int64_t* seg, const Tensor& initial_state, const Tensor& dout,
                   const Tensor& d_final_state, const GatedDeltaOptions& o, Tensor& dq, Tensor& dk, Tensor& dv,
                   Tensor& dg, Tensor& dbeta, Tensor& d_initial_state);
  void (*step)(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
               const Tensor& beta, const GatedDeltaOptions& o, Tensor& state, Tensor& out);
};

namespace gated_delta {

struct Dims {
  int64_t B, S, Hk, Hv, dk, dv;
};

// Checks the operands of forward (dout/d_final_state/gradients: backward); errors name the argument.
Dims check_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                   const int64_t* seg, const Tensor& initial_state, const Tensor& out, const Tensor& final_state,
                   const char* who);
Dims check_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                    const int64_t* seg, const Tensor& initial_state, const Tensor& dout, const Tensor& d_final_state,
                    const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dg, const Tensor& dbeta,
                    const Tensor& d_initial_state, const char* who);
Dims check_step(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                const Tensor& state, const Tensor& out, const char* who);

inline float scale_of(const GatedDeltaOptions& o, int64_t dk) {
  return o.scale > 0 ? o.scale : float(1.0 / __builtin_sqrt(double(dk)));
}

}  // namespace gated_delta
}  // namespace titan
