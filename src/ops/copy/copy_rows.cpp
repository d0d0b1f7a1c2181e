// copy_rows and the column shorthands on the CPU (copy_rows.h).
#include "ops/copy/copy_rows.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/gpu_memory.h"
#include "core/threading.h"
#include "ops/op_checks.h"

namespace titan {

void copy_rows(const ExecContext& ctx, const RowView& src, const RowView& dst) {
  const bool gpu = ctx.device.type == DeviceType::CUDA;
  if (!gpu) opcheck::host_context(ctx, "copy_rows");
  check_view(src, DType::F32, "copy_rows", "src");
  check_view(dst, DType::F32, "copy_rows", "dst");
  check_same_rows(src, dst, "copy_rows", "src", "dst");
  const int64_t w = src.h * src.d;
  const auto s = src.ptr<float>();
  const auto d = dst.ptr<float>();
  if (src.n == 0) return;
  const auto addr = [](const float* p) { return reinterpret_cast<uintptr_t>(p); };
  const uintptr_t s0 = addr(s.base), s1 = addr(s.row(src.n - 1) + w), d0 = addr(d.base),
                  d1 = addr(d.row(dst.n - 1) + w);
  TITAN_CHECK(s1 <= d0 || d1 <= s0, "copy_rows: src and dst overlap");
  if (gpu) {  // both views in the context's device memory: one strided device-to-device copy
    TITAN_CHECK(src.t.device() == ctx.device && dst.t.device() == ctx.device, "copy_rows: views on ",
                src.t.device().str(), " and ", dst.t.device().str(), " with a ", ctx.device.str(), " context");
    gpu::copy_device_2d(d.base, size_t(dst.ld) * sizeof(float), s.base, size_t(src.ld) * sizeof(float),
                        size_t(w) * sizeof(float), size_t(src.n));
    return;
  }
  parallel_for(src.n, std::max<int64_t>(1, 8192 / std::max<int64_t>(w, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::memcpy(d.row(r), s.row(r), size_t(w) * sizeof(float));
  });
}

void take_columns(const ExecContext& ctx, const Tensor& src, int64_t c0, Tensor& dst) {
  TITAN_CHECK(src.defined() && src.ndim() == 2 && dst.defined() && dst.numel() % std::max<int64_t>(src.dim(0), 1) == 0,
              "take_columns: dst ", dst.defined() ? dst.str() : std::string("undefined"), " is not [T, n] rows of src ",
              src.defined() ? src.str() : std::string("undefined"));
  const int64_t T = src.dim(0), n = T ? dst.numel() / T : 0;
  if (n == 0) return;
  copy_rows(ctx, RowView::columns(src, c0, 1, n), RowView::of(dst, 1, n));
}

void put_columns(const ExecContext& ctx, const Tensor& src, Tensor& dst, int64_t c0) {
  TITAN_CHECK(dst.defined() && dst.ndim() == 2 && src.defined() && src.numel() % std::max<int64_t>(dst.dim(0), 1) == 0,
              "put_columns: src ", src.defined() ? src.str() : std::string("undefined"), " is not [T, n] rows for dst ",
              dst.defined() ? dst.str() : std::string("undefined"));
  const int64_t T = dst.dim(0), n = T ? src.numel() / T : 0;
  if (n == 0) return;
  copy_rows(ctx, RowView::of(src, 1, n), RowView::columns(dst, c0, 1, n));
}

}  // namespace titan
