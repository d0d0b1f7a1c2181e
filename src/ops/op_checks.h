// Argument checks shared by the kernels of every op family. A kernel called with tensors of the
// wrong dtype or shape throws titan::Error with one line naming the op, the argument and what it got;
// every check runs before the kernel writes anything, so a rejected call leaves its outputs untouched.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace titan::opcheck {

// A kernel of a CPU variant runs on the calling thread over host memory: a context naming another
// device is a caller's mistake (its tensors would not be where this kernel reads them).
inline void host_context(const ExecContext& ctx, const char* kernel) {
  TITAN_CHECK(ctx.device.type == DeviceType::CPU, kernel, ": runs on the CPU, not on ", ctx.device.str());
}

inline void defined(const Tensor& t, const char* op, const char* name) {
  TITAN_CHECK(t.defined(), op, ": tensor '", name, "' is undefined");
}

inline void f32(const Tensor& t, const char* op, const char* name) {
  defined(t, op, name);
  TITAN_CHECK(t.dtype() == DType::F32, op, ": '", name, "' must be f32, got ", t.str());
}

// Token ids and labels: i32 or i64, any shape (read as a flat list).
inline void index(const Tensor& t, const char* op, const char* name) {
  defined(t, op, name);
  TITAN_CHECK(t.dtype() == DType::I32 || t.dtype() == DType::I64, op, ": '", name, "' must be i32 or i64, got ",
              t.str());
}

inline void numel(const Tensor& t, int64_t n, const char* op, const char* name) {
  TITAN_CHECK(t.numel() == n, op, ": '", name, "' must have ", n, " elements, got ", t.str());
}

inline void last_dim(const Tensor& t, int64_t d, const char* op, const char* name) {
  TITAN_CHECK(t.ndim() >= 1 && t.dim(-1) == d, op, ": '", name, "' must have last dimension ", d, ", got ",
              t.str());
}

inline void same_shape(const Tensor& a, const Tensor& b, const char* op, const char* name_a, const char* name_b) {
  TITAN_CHECK(a.shape() == b.shape(), op, ": '", name_a, "' ", a.str(), " and '", name_b, "' ", b.str(),
              " must have the same shape");
}

// Element i of an index tensor (checked dtype i32/i64) as int64.
inline int64_t index_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::I32 ? int64_t(static_cast<const int32_t*>(t.raw())[i])
                                 : static_cast<const int64_t*>(t.raw())[i];
}

}  // namespace titan::opcheck
