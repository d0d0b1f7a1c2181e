// Strided views of rows, so ops read and write parts of a fused buffer in place instead of
// copying them out and back (ggml's byte strides, in elements here): the q, k and v heads inside
// the fused qkv projection output [T, Q + 2K] and inside its gradient.
//
// A RowView is an [n, h, d] operand: n rows `ld` elements apart, each holding h contiguous
// vectors of length d (heads of head_dim, or one vector of the hidden size). `t` is the memory,
// starting at element (0, 0, 0); it must hold at least (n - 1) * ld + h * d elements. With
// ld == h * d the view is a plain contiguous [n, h, d] tensor.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace titan {

struct RowView {
  Tensor t;
  int64_t n = 0, h = 1, d = 0, ld = 0;

  // A contiguous tensor [..., h, d] (or [..., h * d]) as [numel / (h d), h, d].
  static RowView of(const Tensor& t, int64_t h, int64_t d) {
    TITAN_CHECK(t.defined() && h > 0 && d > 0 && t.numel() % (h * d) == 0, "row view: ",
                t.defined() ? t.str() : std::string("undefined tensor"), " is not a whole number of [", h, ", ", d,
                "] rows");
    return {t, t.numel() / (h * d), h, d, h * d};
  }
  // Columns [c0, c0 + h d) of a row-major 2-D tensor [n, cols] (for example the k heads of a fused
  // qkv buffer: c0 = Q, h = kv_heads, d = head_dim).
  static RowView columns(const Tensor& t, int64_t c0, int64_t h, int64_t d) {
    TITAN_CHECK(t.defined() && t.ndim() == 2 && c0 >= 0 && h > 0 && d > 0 && c0 + h * d <= t.dim(1),
                "row view: columns [", c0, ", ", c0 + h * d, ") of ", t.defined() ? t.str() : std::string("undefined"),
                " are out of range");
    return {t.view({t.numel()}).slice0(c0, t.numel()), t.dim(0), h, d, t.dim(1)};
  }

  // Rows [r0, r0 + count) of this view, as a view.
  RowView rows(int64_t r0, int64_t count) const {
    TITAN_CHECK(r0 >= 0 && count >= 0 && r0 + count <= n, "row view: rows [", r0, ", ", r0 + count, ") of ", n);
    return {t.view({t.numel()}).slice0(r0 * ld, t.numel()), count, h, d, ld};
  }

  int64_t vectors() const { return n * h; }  // the n h vectors of length d
  bool contiguous() const { return ld == h * d; }

  // Raw addressing for a kernel's inner loops (the memory looked up once).
  template <class T>
  struct Ptr {
    T* base;
    int64_t h, d, ld;
    T* vec(int64_t i) const { return base + (i / h) * ld + (i % h) * d; }  // vector i = (row i / h, head i % h)
    T* row(int64_t r) const { return base + r * ld; }
  };
  // T: float for an F32 view, uint16_t (raw bf16 bits) for a BF16 one.
  template <class T>
  Ptr<T> ptr() const {
    TITAN_ASSERT(t.dtype() == (sizeof(T) == 2 ? DType::BF16 : DType::F32), "row view of ", t.str(), " read as ",
                 sizeof(T) == 2 ? "bf16" : "f32");
    return {static_cast<T*>(t.raw()), h, d, ld};
  }
};

// Checks a view: defined memory of dtype `dt` that covers every element, ld >= h * d.
inline void check_view(const RowView& v, DType dt, const char* op, const char* name) {
  TITAN_CHECK(v.t.defined(), op, ": '", name, "' is undefined");
  TITAN_CHECK(v.t.dtype() == dt, op, ": '", name, "' must be ", dtype_name(dt), ", got ", v.t.str());
  TITAN_CHECK(v.n >= 0 && v.h > 0 && v.d > 0 && v.ld >= v.h * v.d, op, ": '", name, "' has a bad layout [n ", v.n,
              ", h ", v.h, ", d ", v.d, ", ld ", v.ld, "]");
  TITAN_CHECK(v.n == 0 || (v.n - 1) * v.ld + v.h * v.d <= v.t.numel(), op, ": '", name, "' [n ", v.n, ", h ", v.h,
              ", d ", v.d, ", ld ", v.ld, "] reaches past its ", v.t.numel(), " elements");
}

// The same rows, heads and vector length.
inline void check_same_rows(const RowView& a, const RowView& b, const char* op, const char* an, const char* bn) {
  TITAN_CHECK(a.n == b.n && a.h == b.h && a.d == b.d, op, ": '", bn, "' [", b.n, ", ", b.h, ", ", b.d,
              "] does not match '", an, "' [", a.n, ", ", a.h, ", ", a.d, "]");
}

}  // namespace titan
