// Row copies between strided row views (ops/row_view.h): the data movement the model's layers do
// around fused buffers — a q/k/v group's columns out of the fused projection, gradients back into
// their columns of the fused gradient, a view packed into a contiguous buffer for a collective and
// unpacked after it. dst row r = src row r (h d f32 values each); rows in parallel.
//
// Takes an ExecContext like every kernel: the CPU's (rows in parallel), or cuda:0's, where both
// views must be in GPU memory (one strided device-to-device copy, gpu::copy_device_2d).
#pragma once
#include "core/exec_context.h"
#include "ops/row_view.h"

namespace titan {

// src and dst: f32 views of the same [n, h, d]; they must not overlap.
void copy_rows(const ExecContext& ctx, const RowView& src, const RowView& dst);

// Shorthands on row-major 2-D tensors: dst [T, n] = columns [c0, c0 + n) of src [T, W]
// (dst any shape of T n elements), and its inverse, columns [c0, c0 + n) of dst [T, W] = src.
void take_columns(const ExecContext& ctx, const Tensor& src, int64_t c0, Tensor& dst);
void put_columns(const ExecContext& ctx, const Tensor& src, Tensor& dst, int64_t c0);

}  // namespace titan
