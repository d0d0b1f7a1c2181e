// Argument checks shared by the attention kernels. Every check runs before a kernel writes
// anything, so a rejected call leaves its outputs untouched; each failure is one line naming the
// kernel, the argument and what it got. Outputs may be passed undefined: they are then allocated
// (f32, owned); a defined output must already have the right shape and dtype.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/row_view.h"

namespace titan::attention {

struct Dims {
  int64_t B = 0, S = 0, Hq = 0, Hkv = 0, D = 0;
  int64_t group() const { return Hq / Hkv; }  // query heads per kv head
};

inline void check_f32_4d(const Tensor& t, const char* who, const char* name) {
  TITAN_CHECK(t.defined(), who, ": tensor '", name, "' is undefined");
  TITAN_CHECK(t.dtype() == DType::F32, who, ": '", name, "' must be f32 (attention runs in f32), got ", t.str());
  TITAN_CHECK(t.ndim() == 4, who, ": '", name, "' must be 4-d [B, S, H, D], got ", t.str());
}

// q [B, S, Hq, D], k and v [B, S, Hkv, D], Hq % Hkv == 0, finite scale.
inline Dims check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const char* who) {
  check_f32_4d(q, who, "q");
  check_f32_4d(k, who, "k");
  check_f32_4d(v, who, "v");
  Dims d{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3)};
  TITAN_CHECK(d.B > 0 && d.S > 0 && d.Hq > 0 && d.D > 0, who, ": 'q' has an empty dimension: ", q.str());
  TITAN_CHECK(k.shape() == v.shape(), who, ": 'k' ", k.str(), " and 'v' ", v.str(), " must have the same shape");
  TITAN_CHECK(k.dim(0) == d.B && k.dim(1) == d.S && k.dim(3) == d.D && d.Hkv > 0, who, ": 'k' ", k.str(),
              " does not match 'q' ", q.str(), " (expected [B, S, Hkv, D])");
  TITAN_CHECK(d.Hq % d.Hkv == 0, who, ": query heads (", d.Hq, ") must be a multiple of kv heads (", d.Hkv, ")");
  TITAN_CHECK(std::isfinite(scale), who, ": scale must be finite, got ", scale);
  return d;
}

// An f32 tensor of exactly `shape`, or allocated when undefined.
inline void check_or_allocate(Tensor& t, const Shape& shape, const char* who, const char* name) {
  if (!t.defined()) return;  // allocated by prepare_output after all checks passed
  TITAN_CHECK(t.dtype() == DType::F32 && t.shape() == shape, who, ": '", name, "' must be f32", shape_str(shape),
              ", got ", t.str());
}
inline void prepare_output(Tensor& t, const Shape& shape) {
  if (!t.defined()) t = Tensor::empty(shape, DType::F32);
}

inline Dims check_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out, Tensor& lse,
                          const char* who) {
  Dims d = check_inputs(q, k, v, scale, who);
  check_or_allocate(out, q.shape(), who, "out");
  check_or_allocate(lse, {d.B, d.Hq, d.S}, who, "lse");
  prepare_output(out, q.shape());
  prepare_output(lse, {d.B, d.Hq, d.S});
  return d;
}

inline Dims check_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                           const Tensor& dout, float scale, Tensor& dq, Tensor& dk, Tensor& dv, const char* who) {
  Dims d = check_inputs(q, k, v, scale, who);
  check_f32_4d(out, who, "out");
  check_f32_4d(dout, who, "dout");
  TITAN_CHECK(out.shape() == q.shape(), who, ": 'out' ", out.str(), " must have the shape of 'q' ", q.str());
  TITAN_CHECK(dout.shape() == q.shape(), who, ": 'dout' ", dout.str(), " must have the shape of 'q' ", q.str());
  TITAN_CHECK(lse.defined() && lse.dtype() == DType::F32 && lse.shape() == Shape({d.B, d.Hq, d.S}), who,
              ": 'lse' must be f32", shape_str({d.B, d.Hq, d.S}), " (from the forward), got ",
              lse.defined() ? lse.str() : std::string("undefined"));
  check_or_allocate(dq, q.shape(), who, "dq");
  check_or_allocate(dk, k.shape(), who, "dk");
  check_or_allocate(dv, v.shape(), who, "dv");
  prepare_output(dq, q.shape());
  prepare_output(dk, k.shape());
  prepare_output(dv, v.shape());
  return d;
}

// The row-view forms (attention.h): q [B*S, Hq, D], k and v [B*S, Hkv, D] f32 views with
// S = seq; out [B, S, Hq, D] and lse [B, Hq, S] defined f32 tensors.
inline Dims check_rows(const RowView& q, const RowView& k, const RowView& v, int64_t seq, float scale,
                       const char* who) {
  check_view(q, DType::F32, who, "q");
  check_view(k, DType::F32, who, "k");
  check_view(v, DType::F32, who, "v");
  TITAN_CHECK(seq > 0 && q.n > 0 && q.n % seq == 0, who, ": 'q' has ", q.n, " token rows, not a positive multiple of ",
              "the sequence length ", seq);
  check_same_rows(k, v, who, "k", "v");
  TITAN_CHECK(k.n == q.n && k.d == q.d, who, ": 'k' [", k.n, ", ", k.h, ", ", k.d, "] does not match 'q' [", q.n,
              ", ", q.h, ", ", q.d, "]");
  TITAN_CHECK(q.h % k.h == 0, who, ": query heads (", q.h, ") must be a multiple of kv heads (", k.h, ")");
  TITAN_CHECK(std::isfinite(scale), who, ": scale must be finite, got ", scale);
  return Dims{q.n / seq, seq, q.h, k.h, q.d};
}

inline void check_contiguous_out(const Tensor& t, const Shape& shape, const char* who, const char* name) {
  TITAN_CHECK(t.defined() && t.dtype() == DType::F32 && t.numel() == shape_numel(shape), who, ": '", name,
              "' must be f32", shape_str(shape), ", got ", t.defined() ? t.str() : std::string("undefined"));
}

// The outputs of a row-view forward (out [B, S, Hq, D], lse [B, Hq, S]) and the gradients of its
// backward (dout like out; dq, dk, dv the views of q, k, v), for the causal and suffix forms alike.
inline void check_outputs(const Dims& d, const Tensor& out, const Tensor& lse, const char* who) {
  check_contiguous_out(out, {d.B, d.S, d.Hq, d.D}, who, "out");
  check_contiguous_out(lse, {d.B, d.Hq, d.S}, who, "lse");
}
inline void check_gradients(const Dims& d, const RowView& q, const RowView& k, const RowView& v, const Tensor& dout,
                            const RowView& dq, const RowView& dk, const RowView& dv, const char* who) {
  check_contiguous_out(dout, {d.B, d.S, d.Hq, d.D}, who, "dout");
  check_view(dq, DType::F32, who, "dq");
  check_view(dk, DType::F32, who, "dk");
  check_view(dv, DType::F32, who, "dv");
  check_same_rows(q, dq, who, "q", "dq");
  check_same_rows(k, dk, who, "k", "dk");
  check_same_rows(v, dv, who, "v", "dv");
}

inline Dims check_rows_forward(const RowView& q, const RowView& k, const RowView& v, int64_t seq, float scale,
                               const Tensor& out, const Tensor& lse, const char* who) {
  const Dims d = check_rows(q, k, v, seq, scale, who);
  check_outputs(d, out, lse, who);
  return d;
}

inline Dims check_rows_backward(const RowView& q, const RowView& k, const RowView& v, const Tensor& out,
                                const Tensor& lse, const Tensor& dout, int64_t seq, float scale, const RowView& dq,
                                const RowView& dk, const RowView& dv, const char* who) {
  const Dims d = check_rows_forward(q, k, v, seq, scale, out, lse, who);
  check_gradients(d, q, k, v, dout, dq, dk, dv, who);
  return d;
}

// The suffix forms (context parallelism, attention.h): q [B*Sq, Hq, D], k and v [B*Sk, Hkv, D]
// with Sk >= Sq; out [B, Sq, Hq, D] and lse [B, Hq, Sq]. Dims::S is Sq.
inline Dims check_rows_suffix(const RowView& q, const RowView& k, const RowView& v, int64_t sq, int64_t sk,
                              float scale, const char* who) {
  check_view(q, DType::F32, who, "q");
  check_view(k, DType::F32, who, "k");
  check_view(v, DType::F32, who, "v");
  TITAN_CHECK(sq > 0 && sk >= sq, who, ": a suffix of ", sq, " queries over ", sk,
              " keys (the queries must be the last sq >= 1 of sk positions)");
  TITAN_CHECK(q.n > 0 && q.n % sq == 0, who, ": 'q' has ", q.n, " token rows, not a positive multiple of ", sq);
  check_same_rows(k, v, who, "k", "v");
  const int64_t B = q.n / sq;
  TITAN_CHECK(k.n == B * sk && k.d == q.d, who, ": 'k' [", k.n, ", ", k.h, ", ", k.d, "] does not match ", B,
              " sequences of ", sk, " keys of 'q' [", q.n, ", ", q.h, ", ", q.d, "]");
  TITAN_CHECK(q.h % k.h == 0, who, ": query heads (", q.h, ") must be a multiple of kv heads (", k.h, ")");
  TITAN_CHECK(std::isfinite(scale), who, ": scale must be finite, got ", scale);
  return Dims{B, sq, q.h, k.h, q.d};
}

inline Dims check_rows_suffix_forward(const RowView& q, const RowView& k, const RowView& v, int64_t sq, int64_t sk,
                                      float scale, const Tensor& out, const Tensor& lse, const char* who) {
  const Dims d = check_rows_suffix(q, k, v, sq, sk, scale, who);
  check_outputs(d, out, lse, who);
  return d;
}

inline Dims check_rows_suffix_backward(const RowView& q, const RowView& k, const RowView& v, const Tensor& out,
                                       const Tensor& lse, const Tensor& dout, int64_t sq, int64_t sk, float scale,
                                       const RowView& dq, const RowView& dk, const RowView& dv, const char* who) {
  const Dims d = check_rows_suffix_forward(q, k, v, sq, sk, scale, out, lse, who);
  check_gradients(d, q, k, v, dout, dq, dk, dv, who);
  return d;
}

}  // namespace titan::attention
